//! An upload written to a local file around the page cache (`O_DIRECT`).
//!
//! A buffered write copies every byte of an upload into the page cache:
//! on a 1 GB upload that copy kept one core of two busy for most of the
//! upload (measured with `perf`), beside the parse reading the same bytes
//! from the upload itself, which never reads the file back. Written
//! directly, the disk takes the bytes from this buffer by DMA: no copy, and
//! no gigabyte of page cache pushed out for a file read again only after
//! a restart. Uploads are not read back while they stream, so nothing is
//! lost.
//!
//! `O_DIRECT` wants the buffer, the file offset and the length aligned to
//! the device's block: the bytes are gathered in aligned parts of
//! [`PART`] bytes, written on a blocking thread while the next part fills
//! (at most two parts per upload in memory), and the unaligned tail is
//! written through the page cache at the end. A file system that refuses
//! `O_DIRECT` (tmpfs) is written through the page cache from the start.
//!
//! Written by hand: no maintained crate offers an aligned, double-buffered
//! direct writer for tokio; the parts are plain `std` file calls.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use tokio::task::JoinHandle;

/// Alignment of buffers, offsets and lengths: a page, a multiple of every
/// logical block size Linux devices use (512 or 4096 bytes).
const ALIGN: usize = 4096;

/// Bytes written at a time (a multiple of [`ALIGN`]).
const PART: usize = 8 << 20;

/// A buffer of [`PART`] bytes starting at an [`ALIGN`]ed address: a
/// vector one alignment longer, used from its first aligned byte. (No
/// unsafe code: the vector is never reallocated, so its address holds.)
struct Part {
    bytes: Vec<u8>,
    start: usize,
    filled: usize,
}

impl Part {
    fn new() -> Part {
        let bytes = vec![0u8; PART + ALIGN];
        let start = bytes.as_ptr().align_offset(ALIGN);
        Part { bytes, start, filled: 0 }
    }

    fn data(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.filled]
    }

    /// Takes what fits of `input`; how much it took.
    fn fill(&mut self, input: &[u8]) -> usize {
        let n = input.len().min(PART - self.filled);
        let at = self.start + self.filled;
        self.bytes[at..at + n].copy_from_slice(&input[..n]);
        self.filled += n;
        n
    }
}

/// A local file being written directly. Dropped unfinished, it removes
/// its file.
pub(crate) struct DirectFile {
    path: PathBuf,
    file: Option<std::sync::Arc<File>>,
    /// Whether the file is open with `O_DIRECT` (false when the open was
    /// refused; a refused write is redone through a buffered handle).
    direct: bool,
    /// The part being filled, and the offset it starts at.
    part: Option<Part>,
    offset: u64,
    /// The part being written, which hands its buffer back.
    writing: Option<JoinHandle<io::Result<Part>>>,
    finished: bool,
}

/// Opens `path` for writing, with `O_DIRECT` where `direct` and the file
/// system allows it: whether it did.
fn open(path: &Path, direct: bool) -> io::Result<(File, bool)> {
    let mut options = OpenOptions::new();
    options.write(true);
    if direct {
        let mut with = options.clone();
        with.custom_flags(nix::fcntl::OFlag::O_DIRECT.bits());
        match with.open(path) {
            Ok(file) => return Ok((file, true)),
            Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((options.open(path)?, false))
}

/// `data` (aligned, from a [`Part`]) written at `offset` of `file`. A
/// direct write the file system refuses (`EINVAL`) is written again
/// through the page cache.
fn write_at(path: &Path, file: &File, direct: bool, data: &[u8], offset: u64) -> io::Result<()> {
    match file.write_all_at(data, offset) {
        Err(e) if direct && e.raw_os_error() == Some(nix::libc::EINVAL) => {
            open(path, false)?.0.write_all_at(data, offset)
        }
        done => done,
    }
}

impl DirectFile {
    /// Creates the file at `path` (its folder must exist).
    pub(crate) async fn create(path: PathBuf) -> io::Result<DirectFile> {
        let opened = path.clone();
        let (file, direct) = tokio::task::spawn_blocking(move || {
            // Created first, then opened: tmpfs creates the file before it
            // refuses `O_DIRECT`, so a create with it could not be retried.
            let created = File::create_new(&opened)?;
            drop(created);
            open(&opened, true)
        })
        .await
        .map_err(io::Error::other)??;
        Ok(DirectFile {
            path,
            file: Some(std::sync::Arc::new(file)),
            direct,
            part: Some(Part::new()),
            offset: 0,
            writing: None,
            finished: false,
        })
    }

    /// Appends `bytes`, waiting while the part before is still being
    /// written once the current one is full.
    pub(crate) async fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let part = self.part.as_mut().ok_or_else(|| io::Error::other("the file is closed"))?;
            bytes = &bytes[part.fill(bytes)..];
            if part.filled == PART {
                self.send().await?;
            }
        }
        Ok(())
    }

    /// Hands the full part to a blocking thread and takes back the one
    /// written before it (or a new one) to fill next.
    async fn send(&mut self) -> io::Result<()> {
        let next = match self.writing.take() {
            Some(writing) => writing.await.map_err(io::Error::other)??,
            None => Part::new(),
        };
        let full = self.part.replace(next).ok_or_else(|| io::Error::other("the file is closed"))?;
        let file = std::sync::Arc::clone(self.file.as_ref().ok_or_else(|| io::Error::other("the file is closed"))?);
        let (path, direct, offset) = (self.path.clone(), self.direct, self.offset);
        self.offset += full.filled as u64;
        self.writing = Some(tokio::task::spawn_blocking(move || {
            write_at(&path, &file, direct, full.data(), offset)?;
            let mut back = full;
            back.filled = 0;
            Ok(back)
        }));
        Ok(())
    }

    /// Writes what is left and closes the file: its aligned head directly,
    /// the rest through the page cache.
    pub(crate) async fn finish(mut self) -> io::Result<()> {
        if let Some(writing) = self.writing.take() {
            writing.await.map_err(io::Error::other)??;
        }
        let part = self.part.take().ok_or_else(|| io::Error::other("the file is closed"))?;
        let file = self.file.take().ok_or_else(|| io::Error::other("the file is closed"))?;
        let (path, direct, offset) = (self.path.clone(), self.direct, self.offset);
        tokio::task::spawn_blocking(move || {
            let data = part.data();
            let head = data.len() / ALIGN * ALIGN;
            if head > 0 {
                write_at(&path, &file, direct, &data[..head], offset)?;
            }
            if head < data.len() {
                let tail = if direct { &open(&path, false)?.0 } else { &*file };
                tail.write_all_at(&data[head..], offset + head as u64)?;
            }
            Ok::<_, io::Error>(())
        })
        .await
        .map_err(io::Error::other)??;
        self.finished = true;
        Ok(())
    }

    /// Stops writing and removes the file.
    pub(crate) async fn abort(mut self) -> io::Result<()> {
        if let Some(writing) = self.writing.take() {
            drop(writing.await);
        }
        self.file = None;
        self.finished = true;
        match tokio::fs::remove_file(&self.path).await {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for DirectFile {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // A write in flight may still create pages of the file; removing the
        // name now frees them once it ends.
        self.file = None;
        if let Err(e) = std::fs::remove_file(&self.path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(file = %self.path.display(), error = %e, "could not remove an abandoned upload");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new folder under the system's temporary folder, removed on drop.
    struct Folder(PathBuf);

    impl Folder {
        fn new() -> Folder {
            let path = std::env::temp_dir().join(format!("vramscope-direct-{}", uuid::Uuid::now_v7().simple()));
            std::fs::create_dir_all(&path).expect("create the folder");
            Folder(path)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Folder {
        fn drop(&mut self) {
            drop(std::fs::remove_dir_all(&self.0));
        }
    }

    fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Every length around the part and alignment edges, written in pieces
    /// of awkward sizes, reads back byte for byte; the file takes no more
    /// than its bytes.
    #[tokio::test]
    async fn every_length_reads_back_whole() {
        let dir = Folder::new();
        for (i, len) in [0, 1, ALIGN - 1, ALIGN, ALIGN + 1, PART - 1, PART, PART + 1, 2 * PART + ALIGN + 7, 3 * PART]
            .into_iter()
            .enumerate()
        {
            let path = dir.path().join(format!("f{i}"));
            let content = pseudo_random(len, i as u64);
            let mut file = DirectFile::create(path.clone()).await.expect("create");
            for piece in content.chunks(1_000_003) {
                file.write(piece).await.expect("write");
            }
            file.finish().await.expect("finish");
            assert_eq!(std::fs::read(&path).expect("read"), content, "length {len}");
        }
    }

    /// Aborted or dropped half-way, the file is gone.
    #[tokio::test]
    async fn abort_and_drop_remove_the_file() {
        let dir = Folder::new();
        let content = pseudo_random(PART + 3 * ALIGN + 5, 9);
        let aborted = dir.path().join("aborted");
        let mut file = DirectFile::create(aborted.clone()).await.expect("create");
        file.write(&content).await.expect("write");
        file.abort().await.expect("abort");
        assert!(!aborted.exists());
        let dropped = dir.path().join("dropped");
        let mut file = DirectFile::create(dropped.clone()).await.expect("create");
        file.write(&content).await.expect("write");
        drop(file);
        assert!(!dropped.exists());
    }

    /// A name taken already is an error, never a file written over.
    #[tokio::test]
    async fn an_existing_file_is_not_overwritten() {
        let dir = Folder::new();
        let path = dir.path().join("taken");
        std::fs::write(&path, b"kept").expect("write");
        assert!(DirectFile::create(path.clone()).await.is_err());
        assert_eq!(std::fs::read(&path).expect("read"), b"kept");
    }
}
