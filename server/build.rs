//! Rebuild when the dashboard's built files change: `include_dir!` (in
//! src/http/web.rs) notices edited files but not new ones.
fn main() {
    println!("cargo:rerun-if-changed=../frontend/dist");
    println!("cargo:rerun-if-changed=build.rs");
}
