#[derive(clap::Args)]
pub struct ParamsArgs {}

pub fn run(_args: ParamsArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
