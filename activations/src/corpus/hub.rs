//! Hugging Face hub datasets: `hf:OWNER/NAME[/SUBDIR][@REVISION]`, read from the local hub cache
//! (`datasets--OWNER--NAME/refs/REVISION` names `snapshots/HASH/`), downloaded there with the
//! `hf-hub` feature when missing.
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The prefix that marks a hub dataset in a corpus spec.
pub const PREFIX: &str = "hf:";

/// A dataset on the hub, the revision to read and the folder of its files to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubDataset {
    /// `OWNER/NAME`.
    pub repo_id: String,
    /// A folder of the dataset repository (e.g. `data`, `sample/10BT`); None for all of it.
    pub subdir: Option<String>,
    /// A branch or tag (`main`, `refs/convert/parquet`) or a commit hash.
    pub revision: String,
}

impl HubDataset {
    /// Parses the part after `hf:`: `OWNER/NAME`, then optionally `/SUBDIR` (any depth), then
    /// optionally `@REVISION` (everything after the `@`, so a revision may hold slashes).
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::config(
                "data.corpus",
                format!("`{PREFIX}{spec}`: {why}; expected hf:OWNER/NAME[/SUBDIR][@REVISION]"),
            )
        };
        let (path, revision) = match spec.split_once('@') {
            Some((p, r)) if !r.is_empty() => (p, r.to_string()),
            Some(_) => return Err(bad("empty revision")),
            None => (spec, "main".to_string()),
        };
        let mut parts = path.splitn(3, '/');
        let owner = parts.next().unwrap_or_default();
        let name = parts.next().unwrap_or_default();
        if owner.is_empty() || name.is_empty() {
            return Err(bad("no OWNER/NAME"));
        }
        let subdir = parts
            .next()
            .map(|s| s.trim_matches('/').to_string())
            .filter(|s| !s.is_empty());
        if subdir
            .as_deref()
            .is_some_and(|s| s.split('/').any(|c| c == ".."))
        {
            return Err(bad("`..` in the folder"));
        }
        Ok(Self {
            repo_id: format!("{owner}/{name}"),
            subdir,
            revision,
        })
    }

    /// `datasets--OWNER--NAME`, the repository's folder in a hub cache.
    pub fn cache_folder(&self) -> String {
        format!("datasets--{}", self.repo_id.replace('/', "--"))
    }

    /// The dataset's folder (the snapshot, or its `SUBDIR`) in the first cache root that holds the
    /// revision. The error lists every `refs` file looked for.
    pub fn locate_offline(&self, roots: &[PathBuf]) -> Result<PathBuf> {
        let mut looked = Vec::new();
        for root in roots {
            let repo = root.join(self.cache_folder());
            let refs = repo.join("refs").join(&self.revision);
            let (hash, from_refs) = match std::fs::read_to_string(&refs) {
                Ok(h) => (h.trim().to_string(), true),
                Err(_) if is_commit_hash(&self.revision) => (self.revision.clone(), false),
                Err(_) => {
                    looked.push(refs.display().to_string());
                    continue;
                }
            };
            let snapshot = repo.join("snapshots").join(&hash);
            if !snapshot.is_dir() && !from_refs {
                looked.push(snapshot.display().to_string());
                continue;
            }
            if !snapshot.is_dir() {
                return Err(Error::Dataset {
                    dataset: self.spec(),
                    file: snapshot,
                    column: None,
                    message: format!("{} names this snapshot, which is missing", refs.display()),
                });
            }
            let dir = match &self.subdir {
                Some(s) => snapshot.join(s),
                None => snapshot,
            };
            if !dir.exists() {
                return Err(Error::Dataset {
                    dataset: self.spec(),
                    file: dir,
                    column: None,
                    message: "no such folder in the snapshot".into(),
                });
            }
            return Ok(dir);
        }
        Err(Error::DatasetNotFound {
            dataset: self.spec(),
            looked,
            hint: if cfg!(feature = "hf-hub") {
                String::new()
            } else {
                "Place the dataset in the Hugging Face cache (HF_HUB_CACHE or HF_HOME; e.g. \
                 `huggingface-cli download --repo-type dataset OWNER/NAME`), or build with \
                 `--features hf-hub` to download it."
                    .into()
            },
        })
    }

    /// The spec this was parsed from, for messages.
    pub fn spec(&self) -> String {
        let sub = self
            .subdir
            .as_deref()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        format!("{PREFIX}{}{sub}@{}", self.repo_id, self.revision)
    }

    /// The dataset's folder: offline from the cache, else (with the `hf-hub` feature) after
    /// downloading its parquet and JSONL files under `SUBDIR` into the first cache root.
    pub fn locate(&self, roots: &[PathBuf]) -> Result<PathBuf> {
        match self.locate_offline(roots) {
            Err(Error::DatasetNotFound { .. }) if cfg!(feature = "hf-hub") => {
                self.download(roots)?;
                self.locate_offline(roots)
            }
            other => other,
        }
    }

    #[cfg(feature = "hf-hub")]
    fn download(&self, roots: &[PathBuf]) -> Result<()> {
        let root = roots.first().cloned().unwrap_or_else(|| PathBuf::from("."));
        let err = |e: hf_hub::api::sync::ApiError| Error::Dataset {
            dataset: self.spec(),
            file: root.join(self.cache_folder()),
            column: None,
            message: format!("download failed: {e}"),
        };
        let api = hf_hub::api::sync::ApiBuilder::from_env()
            .with_cache_dir(root.clone())
            .build()
            .map_err(err)?;
        let repo = api.repo(hf_hub::Repo::with_revision(
            self.repo_id.clone(),
            hf_hub::RepoType::Dataset,
            self.revision.clone(),
        ));
        let prefix = self.subdir.as_deref().map(|s| format!("{s}/"));
        let files: Vec<String> = repo
            .info()
            .map_err(err)?
            .siblings
            .into_iter()
            .map(|s| s.rfilename)
            .filter(|f| prefix.as_deref().is_none_or(|p| f.starts_with(p)))
            .filter(|f| {
                super::files::FileKind::of(Path::new(f))
                    .is_some_and(|k| k != super::files::FileKind::Text)
            })
            .collect();
        if files.is_empty() {
            return Err(Error::Dataset {
                dataset: self.spec(),
                file: root.join(self.cache_folder()),
                column: None,
                message: "the hub repository has no parquet or JSONL files there".into(),
            });
        }
        for f in &files {
            tracing::info!("downloading {} {f}", self.repo_id);
            repo.get(f).map_err(err)?;
        }
        Ok(())
    }

    #[cfg(not(feature = "hf-hub"))]
    fn download(&self, _roots: &[PathBuf]) -> Result<()> {
        Ok(())
    }
}

fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The data files of a located hub dataset folder: parquet and JSONL (plain or compressed);
/// an error naming the folder when there are none.
pub fn dataset_files(dataset: &HubDataset, dir: &Path) -> Result<Vec<super::files::DataFile>> {
    let files = super::files::data_files(dir, |k| k != super::files::FileKind::Text)?;
    if files.is_empty() {
        return Err(Error::Dataset {
            dataset: dataset.spec(),
            file: dir.to_path_buf(),
            column: None,
            message: "no parquet files (nor .jsonl / .jsonl.gz / .jsonl.zst) under the snapshot"
                .into(),
        });
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_owner_name_folder_and_revision() {
        let d = HubDataset::parse("HuggingFaceFW/fineweb-edu/sample/10BT@refs/convert/parquet")
            .unwrap();
        assert_eq!(d.repo_id, "HuggingFaceFW/fineweb-edu");
        assert_eq!(d.subdir.as_deref(), Some("sample/10BT"));
        assert_eq!(d.revision, "refs/convert/parquet");
        let d = HubDataset::parse("roneneldan/TinyStories").unwrap();
        assert_eq!(d.subdir, None);
        assert_eq!(d.revision, "main");
        assert_eq!(d.cache_folder(), "datasets--roneneldan--TinyStories");
        for bad in ["", "owner", "owner/", "/name", "o/n@", "o/n/../x"] {
            assert!(HubDataset::parse(bad).is_err(), "{bad}");
        }
    }
}
