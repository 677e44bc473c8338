//! The `dspark-app` binary: the menu-bar app. All logic lives in the library (`lib.rs`).
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

/// Large buffers (weights, caches) on transparent huge pages, as in the `dspark` binary.
#[global_allocator]
static ALLOC: dspark_engine::huge_pages::HugePageAlloc = dspark_engine::huge_pages::HugePageAlloc;

fn main() {
    dspark_app::run();
}
