#[derive(clap::Args)]
pub struct BenchArgs {
    /// cpu or cuda.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    #[command(flatten)]
    pub cuda: super::bench_cuda::CudaBenchArgs,
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.device == "cuda" {
        return super::bench_cuda::run(&args.cuda);
    }
    anyhow::bail!("not implemented yet")
}
