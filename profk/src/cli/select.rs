#[derive(clap::Args)]
pub struct SelectArgs {}

pub fn run(_args: SelectArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
