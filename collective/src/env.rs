//! Which rank this process is, from the launcher's environment.
//!
//! torchrun (and anything that mimics it) sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
//! MASTER_PORT. Under SLURM (`srun`) the rank comes from SLURM_PROCID, SLURM_NTASKS and
//! SLURM_LOCALID; MASTER_ADDR, when unset, is the first host of SLURM_STEP_NODELIST (else
//! SLURM_NODELIST), and MASTER_PORT, when unset, is derived from SLURM_JOB_ID so that every task of
//! the job picks the same one.

use crate::{Error, Result};

/// Who started the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT.
    Torchrun,
    /// SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID.
    Slurm,
}

/// This process's place in the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorldEnv {
    pub rank: usize,
    pub world: usize,
    /// Rank among the processes of this host: the GPU it drives.
    pub local_rank: usize,
    /// Host where rank 0 listens for the others.
    pub master_addr: String,
    pub master_port: u16,
    pub launcher: Launcher,
}

/// Ports derived from SLURM_JOB_ID lie in `SLURM_PORT_BASE..SLURM_PORT_BASE + SLURM_PORT_SPAN`.
const SLURM_PORT_BASE: u64 = 20_000;
const SLURM_PORT_SPAN: u64 = 20_000;

impl WorldEnv {
    /// Rank 0 of 1: a distributed mode started without a launcher (nothing to rendezvous with).
    pub fn single() -> WorldEnv {
        WorldEnv {
            rank: 0,
            world: 1,
            local_rank: 0,
            master_addr: "127.0.0.1".into(),
            master_port: 0,
            launcher: Launcher::Torchrun,
        }
    }

    /// The process environment's answer: `None` when no launcher variable is set (a plain run).
    pub fn from_process() -> Result<Option<WorldEnv>> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// As [`WorldEnv::from_process`], reading variables through `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<WorldEnv>> {
        let env = if var("RANK").is_some() || var("WORLD_SIZE").is_some() {
            Self::torchrun(&var)?
        } else if var("SLURM_PROCID").is_some() {
            Self::slurm(&var)?
        } else {
            return Ok(None);
        };
        if env.rank >= env.world {
            let name = match env.launcher {
                Launcher::Torchrun => "RANK",
                Launcher::Slurm => "SLURM_PROCID",
            };
            return Err(Error::Env {
                var: name,
                reason: format!(
                    "rank {} is not below the world size {}",
                    env.rank, env.world
                ),
            });
        }
        Ok(Some(env))
    }

    fn torchrun(var: &impl Fn(&str) -> Option<String>) -> Result<WorldEnv> {
        Ok(WorldEnv {
            rank: number(var, "RANK")?,
            world: world_size(var, "WORLD_SIZE")?,
            local_rank: number(var, "LOCAL_RANK")?,
            master_addr: required(var, "MASTER_ADDR")?,
            master_port: port(var, "MASTER_PORT")?,
            launcher: Launcher::Torchrun,
        })
    }

    fn slurm(var: &impl Fn(&str) -> Option<String>) -> Result<WorldEnv> {
        let master_addr = match var("MASTER_ADDR") {
            Some(addr) if !addr.trim().is_empty() => addr.trim().to_string(),
            _ => {
                let (name, list) = if let Some(l) = var("SLURM_STEP_NODELIST") {
                    ("SLURM_STEP_NODELIST", l)
                } else if let Some(l) = var("SLURM_NODELIST") {
                    ("SLURM_NODELIST", l)
                } else {
                    return Err(Error::Env {
                        var: "MASTER_ADDR",
                        reason: "unset, and neither SLURM_STEP_NODELIST nor SLURM_NODELIST names \
                                 the hosts"
                            .into(),
                    });
                };
                first_host(&list).map_err(|reason| Error::Env { var: name, reason })?
            }
        };
        let master_port = if var("MASTER_PORT").is_some() {
            port(var, "MASTER_PORT")?
        } else if var("SLURM_JOB_ID").is_some() {
            let job: u64 = number(var, "SLURM_JOB_ID")? as u64;
            (SLURM_PORT_BASE + job % SLURM_PORT_SPAN) as u16
        } else {
            return Err(Error::Env {
                var: "MASTER_PORT",
                reason: "unset, and no SLURM_JOB_ID to derive it from".into(),
            });
        };
        Ok(WorldEnv {
            rank: number(var, "SLURM_PROCID")?,
            world: world_size(var, "SLURM_NTASKS")?,
            local_rank: number(var, "SLURM_LOCALID")?,
            master_addr,
            master_port,
            launcher: Launcher::Slurm,
        })
    }
}

fn required(var: &impl Fn(&str) -> Option<String>, name: &'static str) -> Result<String> {
    match var(name) {
        Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        Some(_) => Err(Error::Env {
            var: name,
            reason: "is empty".into(),
        }),
        None => Err(Error::Env {
            var: name,
            reason: "is not set (the launcher sets it for every rank)".into(),
        }),
    }
}

fn number(var: &impl Fn(&str) -> Option<String>, name: &'static str) -> Result<usize> {
    let text = required(var, name)?;
    text.parse().map_err(|e| Error::Env {
        var: name,
        reason: format!("{text:?} is not a non-negative integer ({e})"),
    })
}

fn world_size(var: &impl Fn(&str) -> Option<String>, name: &'static str) -> Result<usize> {
    match number(var, name)? {
        0 => Err(Error::Env {
            var: name,
            reason: "is 0; a job has at least one rank".into(),
        }),
        w => Ok(w),
    }
}

fn port(var: &impl Fn(&str) -> Option<String>, name: &'static str) -> Result<u16> {
    let text = required(var, name)?;
    match text.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(Error::Env {
            var: name,
            reason: format!("{text:?} is not a TCP port (1 to 65535)"),
        }),
    }
}

/// The first host of a SLURM host list: `gpu[03-05,09],login1` gives `gpu03`,
/// `rack[1-2]-n[007-008]` gives `rack1-n007`.
pub fn first_host(list: &str) -> std::result::Result<String, String> {
    let mut host = String::new();
    let mut chars = list.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => break,
            '[' => {
                // The first entry of the range list: up to the first ',' or '-', zero padding kept.
                let inner: String = chars.by_ref().take_while(|&c| c != ']').collect();
                let first = inner.split([',', '-']).next().unwrap_or("").trim();
                if first.is_empty() || !first.chars().all(|c| c.is_ascii_digit()) {
                    return Err(format!("{list:?}: bracket [{inner}] holds no host number"));
                }
                host.push_str(first);
            }
            ']' => return Err(format!("{list:?}: ']' without '['")),
            c => host.push(c),
        }
    }
    if host.is_empty() {
        return Err(format!("{list:?} names no host"));
    }
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<Option<WorldEnv>> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        WorldEnv::from_vars(|name| map.get(name).cloned())
    }

    #[test]
    fn torchrun_variables() {
        let e = env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "node7"),
            ("MASTER_PORT", "29500"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((e.rank, e.world, e.local_rank), (3, 8, 1));
        assert_eq!((e.master_addr.as_str(), e.master_port), ("node7", 29500));
        assert_eq!(e.launcher, Launcher::Torchrun);
        assert_eq!(env(&[]).unwrap(), None);
    }

    #[test]
    fn errors_name_the_variable() {
        let base = [
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1234"),
        ];
        let with = |name: &str, value: Option<&str>| {
            let mut pairs: Vec<(&str, &str)> =
                base.iter().copied().filter(|(k, _)| *k != name).collect();
            if let Some(v) = value {
                pairs.push((name, v));
            }
            env(&pairs).unwrap_err().to_string()
        };
        assert!(with("MASTER_ADDR", None).contains("MASTER_ADDR"));
        assert!(with("MASTER_PORT", Some("70000")).contains("MASTER_PORT"));
        assert!(with("LOCAL_RANK", Some("x")).contains("LOCAL_RANK"));
        assert!(with("WORLD_SIZE", Some("0")).contains("WORLD_SIZE"));
        assert!(with("RANK", Some("2")).contains("RANK"));
    }

    #[test]
    fn slurm_variables_and_its_host_list() {
        let e = env(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_STEP_NODELIST", "gpu[03-05,09]"),
            ("SLURM_NODELIST", "other1"),
            ("SLURM_JOB_ID", "123456"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((e.rank, e.world, e.local_rank), (5, 8, 1));
        assert_eq!(e.master_addr, "gpu03");
        assert_eq!(e.master_port, 20_000 + (123_456 % 20_000) as u16);
        assert_eq!(e.launcher, Launcher::Slurm);
        let e = env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODELIST", "a1,b2"),
            ("MASTER_PORT", "4000"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((e.master_addr.as_str(), e.master_port), ("a1", 4000));
        let missing = env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_LOCALID", "0"),
            ("MASTER_PORT", "4000"),
        ])
        .unwrap_err()
        .to_string();
        assert!(missing.contains("MASTER_ADDR"), "{missing}");
    }

    #[test]
    fn host_lists() {
        assert_eq!(first_host("node1").unwrap(), "node1");
        assert_eq!(first_host("gpu[003-010],cpu[1-2]").unwrap(), "gpu003");
        assert_eq!(first_host("rack[1-2]-n[007-008]").unwrap(), "rack1-n007");
        assert_eq!(first_host("a[5,7]").unwrap(), "a5");
        assert!(first_host("").is_err());
        assert!(first_host("a[x]").is_err());
    }
}
