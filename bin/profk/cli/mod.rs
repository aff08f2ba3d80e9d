pub mod bench;
pub mod bench_cuda;
pub mod params;
pub mod select;
