//! The exported SAE laid out as a Hugging Face Hub repository that SAELens' `SAE.from_pretrained(release,
//! sae_id)` loads (docs/saelens.md): `RUN/sae/<sae_id>/` holds the SAELens pair (`cfg.json`,
//! `sae_weights.safetensors`) and `RUN/sae/pretrained_saes.yaml` the release's entry for SAELens' list.
use crate::config::{Config, DataConfig};
use crate::{Error, Result};
use runtime::fs::write_atomic;
use std::path::{Path, PathBuf};

/// The release's entry for SAELens' `pretrained_saes.yaml`, beside the SAE folders.
pub const RELEASE_FILE: &str = "pretrained_saes.yaml";
/// Where a run exports its SAE: the repository's root.
pub const EXPORT_DIR: &str = "sae";
/// The repository owner written into the entry until the user names theirs.
pub const REPO_OWNER_PLACEHOLDER: &str = "HF_USER";

const SAE_CFG: &str = "cfg.json";

/// The SAE's id (and folder) in its release: SAELens' hook name, `blocks.2.hook_resid_post`; a
/// crosscoder's joins its layers, `blocks.1_3.hook_resid_post`; an SAE trained on shards is `sae`.
pub fn sae_id(cfg: &Config) -> String {
    match &cfg.data {
        DataConfig::Model { hook, layers, .. } => {
            let layers: Vec<String> = layers.iter().map(usize::to_string).collect();
            format!("blocks.{}.hook_{hook}", layers.join("_"))
        }
        _ => "sae".into(),
    }
}

/// The folder a run exports its SAE to: `RUN/sae/<sae_id>`.
pub fn export_dir(run_dir: &Path, cfg: &Config) -> PathBuf {
    run_dir.join(EXPORT_DIR).join(sae_id(cfg))
}

/// The release of a run: its directory's name.
pub fn release_name(run_dir: &Path) -> String {
    run_dir
        .canonicalize()
        .ok()
        .as_deref()
        .unwrap_or(run_dir)
        .file_name()
        .map_or_else(
            || "sparsetrain".into(),
            |n| n.to_string_lossy().into_owned(),
        )
}

/// Writes `RUN/sae/pretrained_saes.yaml`: the release (named after the run) with every SAE folder of
/// `RUN/sae/`, its repository `repo_id` (`HF_USER/<release>` when `None`).
pub fn write_release(run_dir: &Path, repo_id: Option<&str>) -> Result<PathBuf> {
    let root = run_dir.join(EXPORT_DIR);
    let release = release_name(run_dir);
    let ids = sae_folders(&root)?;
    let Some(first) = ids.first() else {
        return Err(Error::Data(format!(
            "{}: no SAE folder (one holding {SAE_CFG}) to list in {RELEASE_FILE}",
            root.display()
        )));
    };
    let cfg = read_cfg(&root.join(first))?;
    let model = cfg
        .pointer("/metadata/model_name")
        .and_then(|m| m.as_str())
        .unwrap_or("unknown");
    let repo_id = repo_id.map_or_else(
        || format!("{REPO_OWNER_PLACEHOLDER}/{release}"),
        str::to_string,
    );
    let q = |s: &str| serde_json::Value::from(s).to_string();
    let mut text = format!(
        "# SAELens' pretrained_saes.yaml entry for this release (docs/saelens.md). Upload the folders\n\
         # beside this file to the Hugging Face repository repo_id; SAE.from_pretrained(release, sae_id)\n\
         # loads them once this entry is in SAELens' list, SAE.from_pretrained(repo_id, sae_id) before.\n\
         {}:\n  repo_id: {}\n  model: {}\n  saes:\n",
        q(&release),
        q(&repo_id),
        q(model)
    );
    for id in &ids {
        text.push_str(&format!("  - id: {}\n    path: {}\n", q(id), q(id)));
    }
    let path = root.join(RELEASE_FILE);
    write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

/// The SAE folder `dir` names: `dir` itself when it holds cfg.json (a checkpoint, or an SAE folder),
/// else the one folder in it that does (an exported run's `RUN/sae/`).
pub fn find_sae(dir: &Path) -> Result<PathBuf> {
    if dir.join(SAE_CFG).is_file() {
        return Ok(dir.to_path_buf());
    }
    let ids = sae_folders(dir)?;
    match ids.as_slice() {
        [one] => Ok(dir.join(one)),
        [] => Err(Error::Data(format!(
            "{}: no SAE here: neither it nor a folder in it holds {SAE_CFG}",
            dir.display()
        ))),
        many => Err(Error::Data(format!(
            "{}: holds several SAEs ({}): name one folder",
            dir.display(),
            many.join(", ")
        ))),
    }
}

/// The names of the folders in `root` that hold cfg.json, sorted.
fn sae_folders(root: &Path) -> Result<Vec<String>> {
    let entries = std::fs::read_dir(root).map_err(|e| Error::io(root, e))?;
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(root, e))?;
        if entry.path().join(SAE_CFG).is_file() {
            ids.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    ids.sort();
    Ok(ids)
}

fn read_cfg(dir: &Path) -> Result<serde_json::Value> {
    let path = dir.join(SAE_CFG);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::Checkpoint {
        path,
        msg: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sae_folder(root: &Path, id: &str) {
        let dir = root.join(EXPORT_DIR).join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(SAE_CFG), r#"{"metadata": {"model_name": "gpt2"}}"#).unwrap();
    }

    #[test]
    fn the_release_lists_every_sae_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("my-run");
        sae_folder(&run, "blocks.2.hook_resid_post");
        let path = write_release(&run, None).unwrap();
        let text = std::fs::read_to_string(path).unwrap();
        let body: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            body,
            vec![
                "\"my-run\":",
                "  repo_id: \"HF_USER/my-run\"",
                "  model: \"gpt2\"",
                "  saes:",
                "  - id: \"blocks.2.hook_resid_post\"",
                "    path: \"blocks.2.hook_resid_post\"",
            ]
        );
        let root = run.join(EXPORT_DIR);
        assert_eq!(
            find_sae(&root).unwrap(),
            root.join("blocks.2.hook_resid_post")
        );
        assert_eq!(
            find_sae(&root.join("blocks.2.hook_resid_post")).unwrap(),
            root.join("blocks.2.hook_resid_post")
        );
        sae_folder(&run, "blocks.3.hook_resid_post");
        let err = find_sae(&root).unwrap_err().to_string();
        assert!(err.contains("several SAEs"), "{err}");
        let text = std::fs::read_to_string(write_release(&run, Some("me/x")).unwrap()).unwrap();
        assert!(text.contains("  repo_id: \"me/x\"\n"));
        assert!(text.contains("  - id: \"blocks.3.hook_resid_post\"\n"));
    }
}
