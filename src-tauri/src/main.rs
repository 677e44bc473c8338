//! The `dspark-app` binary: the menu-bar app. All logic lives in the library (`lib.rs`).
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

fn main() {
    dspark_app::run();
}
