//! The programs a test runs as its real clients or peers (curl, openssl, python3 and its
//! modules). A tool a test needs is part of the test: when it is missing the test fails, naming
//! the tool, and never passes green with a note. `.ci/run` and `scripts/test` install each one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Whether `program ARG` runs and exits 0.
fn runs(program: &Path, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Fails the test unless `program` is on PATH and runs (`program --version`, or `program
/// version` as openssl wants).
pub fn require(program: &str) {
    let path = Path::new(program);
    assert!(
        runs(path, "--version") || runs(path, "version"),
        "{program} is needed by this test and is not on PATH (.ci/run installs it)"
    );
}

/// The Python the tests run: `$BERTH_PYTHON` if set, else the project's venv
/// (`target/py-venv`, which `scripts/test` makes and fills) if it exists, else `python3`.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("BERTH_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/py-venv/bin/python");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("python3")
}

/// Fails the test unless [`python`] runs and can `import MODULE` (`asyncio`, `zmq`, ...);
/// returns that Python.
pub fn require_python_module(module: &str) -> PathBuf {
    let python = python();
    let ok = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "this test needs Python's {module} module, and {} cannot import it (scripts/test \
         installs it into target/py-venv; or set BERTH_PYTHON)",
        python.display()
    );
    python
}
