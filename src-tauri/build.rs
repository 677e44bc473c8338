//! Generates Tauri's context (config, capabilities, embedded `ui/`) at build time.
fn main() {
    tauri_build::build()
}
