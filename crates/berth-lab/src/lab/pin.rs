//! Which cores the server and the load generator run on. With two or more cores the server gets
//! one and the load generator the rest, so they do not take turns on a core and each one's CPU
//! time is its own. Affinity is inherited at spawn, so the lab pins its own thread to the client
//! cores once (the load threads it starts later inherit that), and switches to the server core
//! only for the moment it takes to spawn a server.

use std::process::{Child, Command};

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// The lab's placement of server and load generator.
#[derive(Debug, Clone)]
pub struct Pinning {
    /// Cores the server runs on (empty: not pinned).
    pub server: Vec<usize>,
    /// Cores the load generator runs on (empty: not pinned).
    pub client: Vec<usize>,
    /// Cores this process may use at all.
    pub available: Vec<usize>,
}

impl Pinning {
    /// Splits the cores this process may use: the first for the server, the rest for load.
    pub fn plan() -> Pinning {
        let available: Vec<usize> = match sched_getaffinity(Pid::from_raw(0)) {
            Ok(set) => (0..CpuSet::count())
                .filter(|&c| set.is_set(c).unwrap_or(false))
                .collect(),
            Err(_) => Vec::new(),
        };
        if available.len() >= 2 {
            Pinning {
                server: vec![available[0]],
                client: available[1..].to_vec(),
                available,
            }
        } else {
            Pinning {
                server: Vec::new(),
                client: Vec::new(),
                available,
            }
        }
    }

    /// Whether server and load generator are kept apart.
    pub fn is_pinned(&self) -> bool {
        !self.server.is_empty()
    }

    /// Load threads to use: one per client core.
    pub fn load_threads(&self) -> usize {
        self.client.len().max(1)
    }

    /// One line for the table's header.
    pub fn describe(&self) -> String {
        if self.is_pinned() {
            format!(
                "server pinned to core {}, load generator to core(s) {}",
                list(&self.server),
                list(&self.client)
            )
        } else {
            format!(
                "not pinned: {} core(s), so server and load generator share them",
                self.available.len()
            )
        }
    }

    /// Moves the calling thread (and the threads it starts from now on) to the client cores.
    pub fn enter_client(&self) -> std::io::Result<()> {
        set(&self.client)
    }

    /// Spawns `cmd` on the server cores.
    pub fn spawn_server(&self, cmd: &mut Command) -> std::io::Result<Child> {
        set(&self.server)?;
        let child = cmd.spawn();
        set(&self.client)?;
        child
    }
}

fn set(cores: &[usize]) -> std::io::Result<()> {
    if cores.is_empty() {
        return Ok(());
    }
    let mut set = CpuSet::new();
    for &c in cores {
        set.set(c).map_err(std::io::Error::from)?;
    }
    sched_setaffinity(Pid::from_raw(0), &set).map_err(std::io::Error::from)
}

fn list(cores: &[usize]) -> String {
    cores
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_pins() {
        let p = Pinning::plan();
        assert!(!p.available.is_empty());
        if p.available.len() < 2 {
            assert!(!p.is_pinned());
            return;
        }
        assert_eq!(p.server.len() + p.client.len(), p.available.len());
        // Pin a fresh thread, so the test runner's threads keep their affinity.
        let p2 = p.clone();
        std::thread::spawn(move || {
            p2.enter_client().unwrap();
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "grep Cpus_allowed_list /proc/self/status"]);
            cmd.stdout(std::process::Stdio::piped());
            let out = p2
                .spawn_server(&mut cmd)
                .unwrap()
                .wait_with_output()
                .unwrap();
            let text = String::from_utf8(out.stdout).unwrap();
            assert!(text.trim_end().ends_with(&list(&p2.server)), "{text}");
            let own = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            assert!(
                own.contains(&format!("Cpus_allowed_list:\t{}", list(&p2.client)))
                    || p2.client.len() > 1
            );
        })
        .join()
        .unwrap();
    }
}
