//! The JSON of the live pages (`/api/v1/live`, `/api/v1/live/{source}`):
//! the telemetry a capture agent streams ([`Sample`], the agent protocol's
//! own type) and what the server knows of each process and host. Declared
//! once, in `vramscope_shared::api`.

pub use vramscope_shared::api::agent::{NvmlDevice, NvmlProcess, Sample};
pub use vramscope_shared::api::live::{Host, LiveList, LiveRead, Marker, Source};
