fn main() -> anyhow::Result<()> {
    println!("train-sae");
    Ok(())
}
