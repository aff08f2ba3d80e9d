//! Finding the workspace's own files (test fixtures, tools) at run time, without a path baked in at
//! build time: test binaries run where they were built (`cargo test` starts them in their package's
//! directory) and, copied to another machine, from a checkout's root.
use std::path::{Path, PathBuf};

/// Overrides where [`workspace_file`] looks: the repository root.
pub const ROOT_ENV: &str = "SPARSETRAIN_ROOT";

/// `rel` (relative to the repository root, e.g. `gpt2/tests/fixtures/gpt2-ref`): under
/// `$SPARSETRAIN_ROOT` where that is set, else the first match in the current directory or above it;
/// where nothing matches, the path under the current directory (so that the error opening it names it).
pub fn workspace_file(rel: impl AsRef<Path>) -> PathBuf {
    let rel = rel.as_ref();
    if let Some(root) = std::env::var_os(ROOT_ENV) {
        return Path::new(&root).join(rel);
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    cwd.ancestors()
        .map(|dir| dir.join(rel))
        .find(|p| p.exists())
        .unwrap_or_else(|| cwd.join(rel))
}
