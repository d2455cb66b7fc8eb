//! Answers built on the snapshot model and its intervals: which stacks leak
//! ([`leaks`]), why an allocation ran out of memory ([`oom`]) and which
//! allocator settings would have avoided it ([`avoided`]), the memory a
//! replay runs under when none is given ([`capacity`]), what changed
//! between two snapshots ([`diff`]), whether a snapshot keeps a memory
//! budget ([`check`]). [`steps`] finds training steps in the
//! `record_function` annotations; [`layout`] rewinds the final segment layout
//! to an earlier trace row. Which memory pool each row belongs to is
//! [`crate::pools`], below the simulator, which needs it too.
//!
//! Every report is plain data (serde-serializable) and names stacks by their
//! frames' text ([`FrameText`]), not by ids: ids are per file, text is what
//! a reader (and a comparison across files) needs.

pub mod avoided;
pub mod breakdown;
pub mod capacity;
pub mod check;
pub mod diff;
pub mod layout;
pub mod leaks;
pub mod oom;
pub mod steps;
#[cfg(test)]
pub(crate) mod testing;

use serde::{Deserialize, Serialize};

use crate::snapshot::{Snapshot, StackId};

/// One frame as text.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FrameText {
    /// Source file (`??` or empty for C++ frames without one).
    pub filename: String,
    /// Line number (0 when unknown).
    pub line: i64,
    /// Function name.
    pub name: String,
}

impl FrameText {
    /// `filename:line name`, the way tracebacks print a frame.
    pub fn display(&self) -> String {
        format!("{}:{} {}", self.filename, self.line, self.name)
    }

    /// A Python source frame (as opposed to a C++ frame from `stacks="all"`).
    pub fn is_python(&self) -> bool {
        self.filename.ends_with(".py")
    }

    /// Frames nobody wants to read: the ones PyTorch's viewer hides
    /// (`frameFilter` in `MemoryViz.js`: unwinding, dispatch and interpreter
    /// internals), plus `nn.Module`'s call wrappers, which sit between every
    /// pair of module frames.
    pub fn is_noise(&self) -> bool {
        const OMIT_FUNCTIONS: [&str; 8] = [
            "unwind::unwind",
            "CapturedTraceback::gather",
            "gather_with_cpp",
            "_start",
            "__libc_start_main",
            "PyEval_",
            "PyObject_",
            "PyFunction_",
        ];
        const OMIT_FILES: [&str; 10] = [
            "core/boxing",
            "/Register",
            "/Redispatch",
            "pythonrun.c",
            "Modules/main.c",
            "Objects/call.c",
            "Objects/methodobject.c",
            "pycore_ceval.h",
            "ceval.c",
            "cpython/abstract.h",
        ];
        OMIT_FUNCTIONS.iter().any(|f| self.name.contains(f))
            || OMIT_FILES.iter().any(|f| self.filename.contains(f))
            || (self.filename.ends_with("torch/nn/modules/module.py")
                && matches!(self.name.as_str(), "_call_impl" | "_wrapped_call_impl"))
    }

    /// A frame of the program itself: Python, outside installed packages and
    /// the standard library.
    pub fn is_user_code(&self) -> bool {
        const LIBRARY: [&str; 5] = ["site-packages/", "dist-packages/", "/lib/python", "<frozen", "/torch/"];
        self.is_python() && !LIBRARY.iter().any(|l| self.filename.contains(l))
    }
}

/// The frames of a stack as text, innermost first.
pub fn stack_text(snapshot: &Snapshot, stack: StackId) -> Vec<FrameText> {
    snapshot
        .frames
        .stack(stack)
        .iter()
        .filter_map(|&f| snapshot.frames.frame(f))
        .map(|f| FrameText {
            filename: snapshot.strings.get(f.filename).to_owned(),
            line: f.line,
            name: snapshot.strings.get(f.name).to_owned(),
        })
        .collect()
}

/// The frames worth showing, innermost first: noise dropped, and where the
/// stack has Python frames, C++ frames before the first of them dropped too
/// (the allocator's own call chain).
pub fn readable_frames(frames: &[FrameText]) -> Vec<&FrameText> {
    let skip = frames.iter().position(FrameText::is_python).unwrap_or(0);
    frames[skip..].iter().filter(|f| !f.is_noise()).collect()
}

/// A one-line name for a stack: its innermost readable frame and, when that
/// is library code, the innermost frame of the program that led there
/// (`linear.py:134 forward < /srv/jobs/train.py:96 run`).
pub fn stack_label(frames: &[FrameText]) -> String {
    let readable = readable_frames(frames);
    let Some(first) = readable.first() else {
        return "(no frames recorded)".to_owned();
    };
    let short = |f: &FrameText| {
        let file = if f.is_user_code() { f.filename.as_str() } else { f.filename.rsplit('/').next().unwrap_or("") };
        format!("{file}:{} {}", f.line, f.name)
    };
    match readable.iter().find(|f| f.is_user_code()) {
        Some(user) if !first.is_user_code() => format!("{} < {}", short(first), short(user)),
        _ => short(first),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(filename: &str, line: i64, name: &str) -> FrameText {
        FrameText { filename: filename.to_owned(), line, name: name.to_owned() }
    }

    #[test]
    fn label_names_the_library_frame_and_the_program_frame_that_called_it() {
        let frames = vec![
            f("??", 0, "torch::unwind::unwind()"),
            f("CUDACachingAllocator.cpp", 0, "malloc"),
            f("/usr/lib/python3.12/site-packages/torch/nn/modules/linear.py", 134, "forward"),
            f("/usr/lib/python3.12/site-packages/torch/nn/modules/module.py", 1790, "_call_impl"),
            f("/srv/jobs/train.py", 96, "run"),
            f("/srv/jobs/train.py", 188, "<module>"),
        ];
        assert_eq!(stack_label(&frames), "linear.py:134 forward < /srv/jobs/train.py:96 run");
        let readable: Vec<_> = readable_frames(&frames).iter().map(|f| f.line).collect();
        assert_eq!(readable, [134, 96, 188]);
        assert_eq!(stack_label(&frames[4..]), "/srv/jobs/train.py:96 run");
        assert_eq!(stack_label(&[]), "(no frames recorded)");
        // Only C++ frames: keep them, minus the unwinder.
        assert_eq!(stack_label(&frames[..2]), "CUDACachingAllocator.cpp:0 malloc");
    }
}
