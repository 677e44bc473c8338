//! Live settings reload through `SettingsWatcher`: a valid change is applied and reported, an
//! invalid one is reported with line and column while the previous settings stay in force.
//! Waits on the event channel with a bounded timeout; no sleeps.

use std::fs;
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use dspark_hub::settings::{SettingsError, SettingsEvent, SettingsWatcher};

/// Replaces the file atomically, as editors do.
fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, path).unwrap();
}

fn next_matching(
    rx: &Receiver<SettingsEvent>,
    pred: impl Fn(&SettingsEvent) -> bool,
) -> SettingsEvent {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ev = rx
            .recv_timeout(left)
            .expect("no settings event before the deadline");
        if pred(&ev) {
            return ev;
        }
    }
}

#[test]
fn watcher_reloads_valid_changes_and_keeps_settings_on_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    write(&path, "port = 9000\nthinking = true\n");
    let (w, rx) = SettingsWatcher::with_channel(&path).unwrap();
    assert_eq!(w.current().port(), 9000);

    write(&path, "port = 9001\nthinking = false\nmax_draft = 4\n");
    match next_matching(
        &rx,
        |e| matches!(e, SettingsEvent::Changed { settings, .. } if settings.max_draft == Some(4)),
    ) {
        SettingsEvent::Changed {
            settings,
            restart_needed,
        } => {
            assert_eq!(settings.port(), 9001);
            assert_eq!(restart_needed, vec!["port"]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.current().thinking, Some(false));

    write(&path, "port = 9002\nmode = \"warp\"\n");
    match next_matching(&rx, |e| matches!(e, SettingsEvent::Invalid(_))) {
        SettingsEvent::Invalid(SettingsError::Parse {
            line,
            column,
            message,
            ..
        }) => {
            assert_eq!((line, column), (2, 8));
            assert!(message.contains("unknown mode `warp`"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let cur = w.current();
    assert_eq!(
        (cur.port(), cur.max_draft),
        (9001, Some(4)),
        "previous settings stay in force"
    );
}

#[test]
fn missing_file_means_defaults_and_bad_initial_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/config.toml");
    let (w, _rx) = SettingsWatcher::with_channel(&path).unwrap();
    assert_eq!(w.current(), Default::default());
    drop(w);
    fs::write(&path, "port = -1\n").unwrap();
    let err = SettingsWatcher::with_channel(&path)
        .err()
        .expect("invalid initial file");
    assert!(
        matches!(
            err,
            SettingsError::Parse {
                line: 1,
                column: 8,
                ..
            }
        ),
        "{err}"
    );
}
