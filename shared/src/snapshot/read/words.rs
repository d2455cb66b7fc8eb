//! The schema's words: the keys and values of every snapshot generation,
//! interned before parsing ([`WORDS`], in order) so that they have fixed
//! ids and the hot path compares keys as integers.

use crate::snapshot::frames::StrId;

macro_rules! words {
    ($($name:ident = $text:literal),* $(,)?) => {
        #[allow(non_camel_case_types, clippy::upper_case_acronyms, dead_code)]
        #[repr(u32)]
        enum Word { $($name),* }
        /// The words, in the order of their ids.
        pub(super) const WORDS: &[&str] = &[$($text),*];
        $(#[allow(dead_code)] pub(super) const $name: StrId = Word::$name as StrId;)*
    };
}

words! {
    EMPTY = "",
    ACTION = "action", ADDR = "addr", SIZE = "size", STREAM = "stream", TIME_US = "time_us",
    FRAMES = "frames", COMPILE_CONTEXT = "compile_context", USER_METADATA = "user_metadata",
    POOL_ID = "pool_id", DEVICE_FREE = "device_free",
    DEVICE = "device", ADDRESS = "address", TOTAL_SIZE = "total_size", ALLOCATED_SIZE = "allocated_size",
    ACTIVE_SIZE = "active_size", REQUESTED_SIZE = "requested_size", SEGMENT_TYPE = "segment_type",
    SEGMENT_POOL_ID = "segment_pool_id", IS_EXPANDABLE = "is_expandable", BLOCKS = "blocks",
    STATE = "state", HISTORY = "history", REAL_SIZE = "real_size",
    FILENAME = "filename", LINE = "line", NAME = "name",
    SEGMENTS = "segments", DEVICE_TRACES = "device_traces", ALLOCATOR_SETTINGS = "allocator_settings",
    EXTERNAL_ANNOTATIONS = "external_annotations", STAGE = "stage",
    A_ALLOC = "alloc", A_FREE_REQUESTED = "free_requested", A_FREE_COMPLETED = "free_completed",
    A_SEGMENT_ALLOC = "segment_alloc", A_SEGMENT_FREE = "segment_free", A_SEGMENT_MAP = "segment_map",
    A_SEGMENT_UNMAP = "segment_unmap", A_SNAPSHOT = "snapshot", A_OOM = "oom",
    ACTIVE_ALLOCATED = "active_allocated", ACTIVE_PENDING_FREE = "active_pending_free", INACTIVE = "inactive",
    LARGE = "large", SMALL = "small", START = "START", END = "END",
    VRAMSCOPE_CAPTURE = "vramscope_capture", HOST_SEGMENTS = "host_segments", HOST_TRACES = "host_traces",
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pickle::Heap;
    use crate::snapshot::trace::Action;

    #[test]
    fn fixed_words_get_fixed_ids() {
        let mut heap = Heap::new(1 << 20);
        for w in WORDS {
            heap.intern(w, 0).expect("budget");
        }
        assert_eq!(heap.lookup_str("action"), Some(ACTION));
        assert_eq!(heap.lookup_str("oom"), Some(A_OOM));
        assert_eq!(heap.lookup_str("END"), Some(END));
        // Action codes are word offsets from "alloc": keep the two lists in step.
        for (i, (name, _)) in Action::KNOWN.iter().enumerate() {
            assert_eq!(heap.lookup_str(name), Some(A_ALLOC + i as u32));
        }
    }
}
