//! What a server under test costs. Each server is started as the leader of a process group of
//! its own, so the group is exactly the server: a forking model's children included, the lab
//! excluded.
//!
//! - Memory: resident set of the group's live processes, read from `/proc/PID/stat`.
//! - CPU: read once the server has exited and been reaped, from the lab's own
//!   `RUSAGE_CHILDREN`, which then holds the exact CPU time of the server and of every
//!   descendant it reaped. `/proc/PID/stat` times of live processes are not used: on a busy
//!   core they were seen to lag far behind (100 forked children showed 1.06 s while they had
//!   run 1.7 s).

use std::fs;
use std::time::Duration;

/// CPU time of this process's reaped children (and theirs), so far.
pub fn children_cpu() -> Duration {
    rusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
}

/// Resident memory of the processes of group `pgid` right now, in bytes.
pub fn group_rss(pgid: i32) -> u64 {
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096) as u64;
    members(pgid).map(|f| f.rss_pages * page).sum()
}

/// CPU time this process (the lab and its load threads) has used so far.
pub fn own_cpu() -> Duration {
    rusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
}

fn rusage(who: nix::sys::resource::UsageWho) -> Duration {
    match nix::sys::resource::getrusage(who) {
        Ok(u) => {
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::new(tv.tv_sec() as u64, tv.tv_usec() as u32 * 1000)
            };
            t(u.user_time()) + t(u.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

/// The fields of `/proc/PID/stat` the lab reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    pgrp: i32,
    rss_pages: u64,
}

fn members(pgid: i32) -> impl Iterator<Item = Stat> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|s| parse_stat(&s))
        .filter(move |s| s.pgrp == pgid)
}

/// Parses `/proc/PID/stat`. The command name (field 2) may hold spaces and parentheses, so
/// fields are counted from the last `)`.
fn parse_stat(line: &str) -> Option<Stat> {
    let rest = line.get(line.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    // `rest` starts at field 3 (state); field N is f[N - 3].
    let num = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some(Stat {
        pgrp: f.get(5 - 3)?.parse().ok()?,
        rss_pages: num(24)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_spaces_and_parens() {
        let line = "1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 \
                    7 3 2 1 20 0 1 0 100 1000000 250 18446744073709551615 1 1 0 0 0 0 0 0 0 0 \
                    0 0 17 0 0 0 0 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                pgrp: 1234,
                rss_pages: 250,
            })
        );
    }

    #[test]
    fn reads_a_real_group() {
        use std::os::unix::process::CommandExt;
        use std::time::Instant;
        let until = |what: &str, ok: &dyn Fn() -> bool| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !ok() {
                assert!(Instant::now() < deadline, "{what}");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        // CPU: a child that burns a little and exits is in RUSAGE_CHILDREN once reaped.
        let before = children_cpu();
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done"])
            .status()
            .unwrap();
        assert!(status.success());
        assert!(children_cpu() - before >= Duration::from_millis(20));
        assert!(own_cpu() > Duration::ZERO);

        // Memory: a sleeping child in a group of its own, then none.
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id() as i32;
        // Right after exec its pages are not all faulted in yet; wait for them.
        until("the group's RSS shows", &|| group_rss(pgid) > 100 * 1024);
        let group = nix::unistd::Pid::from_raw(pgid);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = child.wait();
        until("the group's RSS goes", &|| group_rss(pgid) == 0);
    }
}
