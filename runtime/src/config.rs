//! Loading a command's config: a TOML file with `--set section.key=value` overrides, errors that
//! name the user's line or override, renamed-key hints, and the `device` and dtype values every
//! config shares.

use crate::error::{Error, Result};
use schemars::JsonSchema;
use serde::{de::DeserializeOwned, Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// `device = "cpu" | "cuda" | "cuda:N"` (`cuda` is `cuda:0`), the one parser of device names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum DeviceSpec {
    #[default]
    Cpu,
    /// A CUDA device by ordinal.
    Cuda(usize),
}

impl DeviceSpec {
    pub fn is_cuda(self) -> bool {
        matches!(self, DeviceSpec::Cuda(_))
    }
}

impl FromStr for DeviceSpec {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceSpec::Cuda)
                .ok_or_else(|| format!("{s:?} is not a device: expected cpu, cuda or cuda:N")),
        }
    }
}

impl JsonSchema for DeviceSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DeviceSpec".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^(cpu|cuda|cuda:[0-9]+)$",
        })
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl Serialize for DeviceSpec {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DeviceSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Floating-point type of activations or model weights: `"f32" | "bf16" | "f16"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    #[default]
    F32,
    Bf16,
    F16,
}

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "f16",
        }
    }
}

/// A config file as given, with the `--set` overrides applied to its TOML table.
#[derive(Debug, Clone)]
pub struct ConfigSource {
    pub path: PathBuf,
    /// The file's text, unchanged.
    pub text: String,
    /// `section.key=value` overrides in the order given.
    pub overrides: Vec<String>,
    /// The file's table with the overrides applied.
    table: toml::Table,
}

impl ConfigSource {
    /// Reads `path` and applies `overrides` (each `section.key=value`; the value is TOML, and a bare
    /// word that is not TOML is taken as a string, so `--set device=cuda:1` works unquoted).
    pub fn load(path: &Path, overrides: &[String]) -> Result<ConfigSource> {
        let text = std::fs::read_to_string(path).map_err(Error::io("reading the config", path))?;
        Self::from_text(path, text, overrides)
    }

    /// Text given in code rather than read from a file: `<config>` in errors, no overrides.
    pub fn inline(text: &str) -> Result<ConfigSource> {
        Self::from_text(Path::new("<config>"), text.into(), &[])
    }

    /// As [`ConfigSource::load`], for text already read (`path` names it in errors).
    pub fn from_text(path: &Path, text: String, overrides: &[String]) -> Result<ConfigSource> {
        let mut table: toml::Table = toml::from_str(&text).map_err(|e| Error::Parse {
            path: path.to_path_buf(),
            line: line_of(&text, e.span()),
            message: e.message().to_string(),
        })?;
        for o in overrides {
            apply_override(&mut table, o)?;
        }
        Ok(ConfigSource {
            path: path.to_path_buf(),
            text,
            overrides: overrides.to_vec(),
            table,
        })
    }

    /// The file's stem: the config name runs are grouped by.
    pub fn name(&self) -> String {
        self.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Deserializes the config. A key in `renamed` (old dotted name → new one) is refused with its new
    /// name before serde sees it; other unknown keys are refused by the types' `deny_unknown_fields`.
    ///
    /// An error is placed where the user wrote the cause: at its line of the file
    /// ([`Error::Parse`]), or at the `--set` override that brought it in ([`Error::Override`]).
    pub fn parse<T: DeserializeOwned>(&self, renamed: &[(&str, &str)]) -> Result<T> {
        for (old, new) in renamed {
            let message = format!("was renamed to `{new}`");
            if let Some(item) = self
                .overrides
                .iter()
                .find(|o| override_key(o) == Some(*old))
            {
                let item = item.clone();
                return Err(Error::Override { item, message });
            }
            if lookup(&self.table, old).is_some() {
                let message = format!("{message} (in {})", self.path.display());
                return Err(Error::config(*old, message));
            }
        }
        if self.overrides.is_empty() {
            return toml::from_str(&self.text).map_err(|e| self.in_file(&e));
        }
        toml::from_str(&self.effective_text()).map_err(|e| self.locate::<T>(&e))
    }

    /// The cause of `error`, met with every override applied: the file itself when it fails alone
    /// with the same message (its line is then the user's), else the override without which the
    /// error goes away.
    fn locate<T: DeserializeOwned>(&self, error: &toml::de::Error) -> Error {
        let message = error.message();
        if let Err(alone) = toml::from_str::<T>(&self.text) {
            if alone.message() == message {
                return self.in_file(&alone);
            }
        }
        let same_error_without = |left_out: usize| {
            let Ok(mut table) = toml::from_str::<toml::Table>(&self.text) else {
                return true;
            };
            for (i, item) in self.overrides.iter().enumerate() {
                if i != left_out && apply_override(&mut table, item).is_err() {
                    return true;
                }
            }
            let text = toml::to_string(&table).unwrap_or_default();
            toml::from_str::<T>(&text).is_err_and(|e| e.message() == message)
        };
        match (0..self.overrides.len()).find(|&i| !same_error_without(i)) {
            Some(i) => Error::Override {
                item: self.overrides[i].clone(),
                message: message.to_string(),
            },
            None => Error::Parse {
                path: self.path.clone(),
                line: 0,
                message: format!("{message} (with the --set overrides applied)"),
            },
        }
    }

    /// An error of the file's own text, at its line.
    fn in_file(&self, e: &toml::de::Error) -> Error {
        Error::Parse {
            path: self.path.clone(),
            line: line_of(&self.text, e.span()),
            message: e.to_string().trim_end().to_string(),
        }
    }

    /// The TOML the run used: the file as given, or, with overrides, the table after them (headed by
    /// a comment naming the file and the overrides).
    pub fn effective_text(&self) -> String {
        if self.overrides.is_empty() {
            return self.text.clone();
        }
        let mut out = format!("# {}", self.path.display());
        for o in &self.overrides {
            out.push_str(&format!(" --set {o}"));
        }
        out.push('\n');
        out.push_str(&toml::to_string(&self.table).unwrap_or_default());
        out
    }
}

/// Line (1-based) of a byte span in `text`; 0 when unknown.
fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> usize {
    span.map_or(0, |s| {
        text[..s.start.min(text.len())].matches('\n').count() + 1
    })
}

/// The dotted key of a `section.key=value` override.
fn override_key(item: &str) -> Option<&str> {
    item.split_once('=').map(|(key, _)| key.trim())
}

fn lookup<'a>(table: &'a toml::Table, dotted: &str) -> Option<&'a toml::Value> {
    let mut parts = dotted.split('.');
    let mut value = table.get(parts.next()?)?;
    for part in parts {
        value = value.as_table()?.get(part)?;
    }
    Some(value)
}

fn apply_override(table: &mut toml::Table, item: &str) -> Result<()> {
    let bad = |message: String| Error::config(item, message);
    let (key, raw) = item
        .split_once('=')
        .ok_or_else(|| bad("--set needs section.key=value".into()))?;
    let key = key.trim();
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(bad(format!("{key:?} is not a dotted key")));
    }
    let raw = raw.trim();
    let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()));
    let (last, sections) = parts.split_last().ok_or_else(|| bad("empty key".into()))?;
    let mut here = table;
    for (i, part) in sections.iter().enumerate() {
        let entry = here
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        here = entry.as_table_mut().ok_or_else(|| {
            bad(format!(
                "`{}` is a value, not a section",
                parts[..=i].join(".")
            ))
        })?;
    }
    here.insert(last.to_string(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Small {
        device: DeviceSpec,
        train: SmallTrain,
    }
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct SmallTrain {
        steps: u64,
        #[serde(default)]
        lr: f64,
    }

    fn source(text: &str, sets: &[&str]) -> Result<ConfigSource> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        ConfigSource::from_text(Path::new("c.toml"), text.into(), &sets)
    }

    #[test]
    fn devices_parse_in_one_place() {
        assert_eq!("cpu".parse(), Ok(DeviceSpec::Cpu));
        assert_eq!("cuda".parse(), Ok(DeviceSpec::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(DeviceSpec::Cuda(3)));
        assert!("tpu".parse::<DeviceSpec>().unwrap_err().contains("cuda:N"));
        assert!("cuda:x".parse::<DeviceSpec>().is_err());
        assert_eq!(DeviceSpec::Cuda(1).to_string(), "cuda:1");
    }

    #[test]
    fn overrides_are_checked_like_the_file() {
        let text = "device = \"cpu\"\n[train]\nsteps = 3\n";
        let cfg: Small = source(text, &["train.lr=0.5", "device=cuda:1"])
            .unwrap()
            .parse(&[])
            .unwrap();
        assert_eq!((cfg.train.lr, cfg.device), (0.5, DeviceSpec::Cuda(1)));
        let unknown = source(text, &["train.lrr=0.5"])
            .unwrap()
            .parse::<Small>(&[]);
        assert!(unknown.unwrap_err().to_string().contains("lrr"));
        let wrong_type = source(text, &["train.steps=many"])
            .unwrap()
            .parse::<Small>(&[]);
        assert!(wrong_type.is_err());
        let not_a_section = source(text, &["device.x=1"]).unwrap_err().to_string();
        assert!(
            not_a_section.contains("`device` is a value"),
            "{not_a_section}"
        );
        assert!(source(text, &["steps"]).is_err());
        let effective = source(text, &["train.lr=0.5"]).unwrap().effective_text();
        assert!(
            effective.starts_with("# c.toml --set train.lr=0.5\n"),
            "{effective}"
        );
        assert!(effective.contains("lr = 0.5"), "{effective}");
    }

    #[test]
    fn errors_name_the_users_line_or_the_override() {
        // Comments and blank lines that a re-serialized table would not have: line 7 is `lr = "abc"`.
        let text =
            "# a tiny config\n\ndevice = \"cpu\" # where\n\n[train]\nsteps = 3\nlr = \"abc\"\n";
        let err = |sets: &[&str]| source(text, sets).unwrap().parse::<Small>(&[]).unwrap_err();
        for sets in [
            &[][..],
            &["device=cuda:1"][..],
            &["train.steps=4", "device=cpu"][..],
        ] {
            match err(sets) {
                Error::Parse { path, line, .. } => {
                    assert_eq!((path.to_str(), line), (Some("c.toml"), 7), "{sets:?}")
                }
                other => panic!("{sets:?}: {other}"),
            }
        }
        let fixed = "device = \"cpu\"\n[train]\nsteps = 3\n";
        let bad_set = source(fixed, &["train.lr=0.5", "train.steps=abc"])
            .unwrap()
            .parse::<Small>(&[])
            .unwrap_err()
            .to_string();
        assert!(
            bad_set.starts_with("--set train.steps=abc: invalid type"),
            "{bad_set}"
        );
        assert!(!bad_set.contains("line"), "{bad_set}");
        let unknown = source(fixed, &["train.lrr=1"])
            .unwrap()
            .parse::<Small>(&[])
            .unwrap_err()
            .to_string();
        assert!(
            unknown.starts_with("--set train.lrr=1: unknown field `lrr`"),
            "{unknown}"
        );
        // A bad value in the file that an override replaces is no error.
        let cfg: Small = source(text, &["train.lr=0.5"]).unwrap().parse(&[]).unwrap();
        assert_eq!(cfg.train.lr, 0.5);
    }

    #[test]
    fn a_renamed_key_names_its_new_name() {
        let text = "device = \"cpu\"\n[train]\nsteps = 3\nlr_warmup_steps = 2\n";
        let err = source(text, &[])
            .unwrap()
            .parse::<Small>(&[("train.lr_warmup_steps", "train.warmup_steps")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("train.lr_warmup_steps") && err.contains("train.warmup_steps"),
            "{err}"
        );
        let set = source(
            "device = \"cpu\"\n[train]\nsteps = 3\n",
            &["train.lr_warmup_steps=2"],
        )
        .unwrap()
        .parse::<Small>(&[("train.lr_warmup_steps", "train.warmup_steps")])
        .unwrap_err()
        .to_string();
        assert_eq!(
            set,
            "--set train.lr_warmup_steps=2: was renamed to `train.warmup_steps`"
        );
    }
}
