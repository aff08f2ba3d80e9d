pub mod bench;
pub mod params;
pub mod select;
