//! The processes a test made, as `/proc` shows them (std only).

/// One process as `/proc/PID/stat` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    /// Process id.
    pub pid: i32,
    /// Parent's process id.
    pub ppid: i32,
    /// State letter: `R`, `S`, `D`, `Z` (zombie), ...
    pub state: char,
}

/// Reads `/proc/PID/stat`; `None` if the process is gone.
pub fn proc_stat(pid: i32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) S ppid ...`: comm may hold spaces and parentheses, so split after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some(Proc { pid, ppid, state })
}

/// Every process whose parent is `parent`, zombies included.
pub fn children_of(parent: i32) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(proc_stat)
        .filter(|p| p.ppid == parent)
        .collect()
}

/// This process's id.
pub fn my_pid() -> i32 {
    std::process::id() as i32
}

/// Whether `pid` still exists as a process (zombies count: they are not reaped yet).
pub fn exists(pid: i32) -> bool {
    proc_stat(pid).is_some()
}

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|p| p.state != 'Z')
}

/// How many descriptors process `pid` has open (0 if it is gone).
pub fn open_descriptors(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}
