//! The integration tests as one binary, suites as modules (the ripgrep
//! way: one link of the server for all of them). Suites move here from
//! their own `[[test]]` targets one by one; new suites start here.

mod common;
mod hostile;
mod ingest;
