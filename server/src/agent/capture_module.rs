//! The Python capture module, shipped inside the binary and written to a
//! private folder at start, which the job gets first on its PYTHONPATH.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// `sitecustomize.py`: Python runs it at start-up; it starts the capture.
const SITECUSTOMIZE: &str = include_str!("../../../assets/capture/sitecustomize.py");
/// The `vramscope_capture` package.
const CAPTURE_MODULE: &str = include_str!("../../../assets/capture/vramscope_capture/__init__.py");

/// A folder only this user can read, removed when dropped: the Python
/// files and the agent's socket live here.
#[derive(Debug)]
pub(crate) struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    /// Creates `vramscope-agent-<uuid>` under the system's temporary folder
    /// with mode 0700 and writes the Python files into `python/`.
    pub(crate) fn create() -> Result<PrivateDir> {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!("vramscope-agent-{}", uuid::Uuid::now_v7()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("cannot create the agent's private folder {}", path.display()))?;
        let dir = PrivateDir { path };
        let package = dir.python_path().join("vramscope_capture");
        std::fs::create_dir_all(&package).with_context(|| format!("cannot create {}", package.display()))?;
        write(&dir.python_path().join("sitecustomize.py"), SITECUSTOMIZE)?;
        write(&package.join("__init__.py"), CAPTURE_MODULE)?;
        Ok(dir)
    }

    /// The folder to put first on the job's PYTHONPATH.
    pub(crate) fn python_path(&self) -> PathBuf {
        self.path.join("python")
    }

    /// Where the agent listens for the job's processes.
    pub(crate) fn socket_path(&self) -> PathBuf {
        self.path.join("agent.sock")
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// `python_dir` followed by an existing PYTHONPATH, if any.
pub(crate) fn python_path_with(python_dir: &Path, existing: Option<std::ffi::OsString>) -> std::ffi::OsString {
    let mut paths = vec![python_dir.to_path_buf()];
    if let Some(existing) = existing {
        paths.extend(std::env::split_paths(&existing).filter(|p| !p.as_os_str().is_empty()));
    }
    std::env::join_paths(paths).unwrap_or_else(|_| python_dir.as_os_str().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_dir_holds_the_package_and_goes_away() {
        let dir = PrivateDir::create().expect("create");
        let python = dir.python_path();
        let text = std::fs::read_to_string(python.join("vramscope_capture/__init__.py")).expect("module");
        assert!(text.contains("def install("));
        assert!(python.join("sitecustomize.py").is_file());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(python.parent().expect("parent")).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        drop(dir);
        assert!(!python.exists());
    }

    #[test]
    fn existing_python_path_is_kept_after_ours() {
        let joined = python_path_with(Path::new("/a"), Some("/b:/c".into()));
        assert_eq!(joined, "/a:/b:/c");
        assert_eq!(python_path_with(Path::new("/a"), None), "/a");
    }
}
