//! Hands the git commit and this package's enabled features to the command-line tools (`--version`,
//! run.json).
fn main() {
    runtime::build_info::emit();
}
