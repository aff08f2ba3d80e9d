pub mod bench;
pub mod bench_cuda;
pub mod epsilon;
pub mod params;
pub mod select;
