//! An allocation's stack, grouped for reading: the user's own frames stay
//! visible, and each run of PyTorch's internal frames (a file under
//! `site-packages/torch`) folds into one collapsible group, since those
//! rarely say *why* memory was allocated.

use crate::core::model::Frame;

/// A run of consecutive frames of one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameRun {
    /// The frames are PyTorch's own (collapsed by default).
    pub torch: bool,
    /// The frames, innermost first, as the API lists them.
    pub frames: Vec<Frame>,
}

/// Whether a frame belongs to PyTorch itself.
pub fn is_torch_frame(frame: &Frame) -> bool {
    frame.filename.replace('\\', "/").contains("site-packages/torch")
}

/// Split a stack into runs of user and PyTorch frames, keeping the order.
pub fn group(frames: &[Frame]) -> Vec<FrameRun> {
    let mut runs: Vec<FrameRun> = Vec::new();
    for frame in frames {
        let torch = is_torch_frame(frame);
        match runs.last_mut() {
            Some(run) if run.torch == torch => run.frames.push(frame.clone()),
            _ => runs.push(FrameRun { torch, frames: vec![frame.clone()] }),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(filename: &str) -> Frame {
        Frame { filename: filename.to_owned(), line: 1, name: "f".to_owned() }
    }

    #[test]
    fn torch_frames_group_into_runs() {
        let stack = [
            frame("/usr/lib/python3/site-packages/torch/nn/modules/linear.py"),
            frame("/usr/lib/python3/site-packages/torch/nn/modules/module.py"),
            frame("/home/me/train.py"),
            frame("C:\\py\\site-packages\\torch\\_tensor.py"),
            frame("/home/me/main.py"),
        ];
        let runs = group(&stack);
        let shape: Vec<(bool, usize)> = runs.iter().map(|r| (r.torch, r.frames.len())).collect();
        assert_eq!(shape, [(true, 2), (false, 1), (true, 1), (false, 1)]);
        assert!(group(&[]).is_empty());
        assert!(!is_torch_frame(&frame("/home/me/torchvision_helpers.py")));
    }
}
