//! Hostile input and abuse: every attack we know of, each as a regression
//! test under its own name. `reader` feeds bombs to the reader in child
//! processes and measures their peak memory; `http` attacks a real server
//! on a loopback port and checks that it refuses, and still serves.

mod bombs;
mod http;
mod reader;
