//! The JSON of the jobs pages (`/api/v1/jobs`, `/api/v1/jobs/{job}`): a
//! job's ranks side by side, as the server aggregates them. Declared once,
//! in `vramscope_shared::api`.

pub use vramscope_shared::api::jobs::{JobReport, JobSummary, Member};
