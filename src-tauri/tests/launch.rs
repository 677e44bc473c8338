//! For the same settings, the app's loader and `dspark serve` launch the same engine: both
//! go through `dspark_hub::launch::launch_spec` and `dspark_engine::launch`, so the
//! `LaunchSpec`s are equal and the pipelines they build agree on every setting (backend,
//! quantized weights, draft knobs, prefix cache). Uses the tiny committed fixture models.

use std::path::PathBuf;

use dspark_app::host::Host;
use dspark_engine::launch::{build_pipeline, candle_backend, BackendKind};
use dspark_engine::spec::Mode;
use dspark_hub::download::NoProgress;
use dspark_hub::layers::Layers;
use dspark_hub::settings::Settings;

fn models() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/spec/models")
}

#[test]
fn app_loader_and_serve_build_the_same_pipeline() {
    // the environment layer sits above the file: clear it (the only test in this binary)
    for key in dspark_hub::layers::KEYS {
        std::env::remove_var(format!("DSPARK_{}", key.to_uppercase()));
    }
    let dir = std::env::temp_dir().join(format!("dspark-app-launch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.toml");
    let m = models();
    std::fs::write(
        &path,
        format!(
            "model = {:?}\nmode = \"dspark\"\ndrafter = {:?}\nbackend = \"candle\"\n\
             keep_quantized = true\nmax_draft = 3\nconfidence_threshold = 0.25\n\
             prefix_cache_slots = 3\nprefix_cache_ram_mb = 64\nqueue = 2\n",
            m.join("target").display().to_string(),
            m.join("dspark").display().to_string(),
        ),
    )
    .unwrap();

    // `dspark serve` with no flags: the environment over this file over the defaults
    let merged = Layers::load(Settings::default(), Some(&path))
        .unwrap()
        .merged();
    let serve = dspark_hub::launch::launch_spec(&merged, &NoProgress).unwrap();
    // the app's start-up load of the same file
    let host = Host::new(path.clone());
    let req = dspark_app::initial_load(&host);
    let app = dspark_app::loader::launch_for(&path, &req, &NoProgress).unwrap();
    assert_eq!(app, serve);

    // what the app's old start-up copy got wrong is now taken from the settings
    let s = &app.spec;
    assert_eq!((s.mode, s.backend), (Mode::Dspark, BackendKind::Candle));
    assert!(s.keep_quantized);
    assert_eq!(
        (s.max_draft, s.confidence_threshold, s.queue),
        (Some(3), 0.25, 2)
    );
    let pc = s.prefix_cache.as_ref().expect("prefix cache on");
    assert_eq!((pc.max_slots, pc.max_ram_bytes), (3, 64 << 20));
    assert_eq!(app.id, "target");

    // the pipelines themselves agree
    let b = candle_backend(&serve.spec).unwrap();
    let (pa, ps) = (
        build_pipeline(&app.spec, &b).unwrap(),
        build_pipeline(&serve.spec, &b).unwrap(),
    );
    for p in [&pa, &ps] {
        assert_eq!(p.mode, Mode::Dspark);
        assert_eq!(p.drafter_name(), Some("dspark"));
        assert_eq!((p.spec.max_draft, p.spec.confidence_threshold), (3, 0.25));
        assert!(p.prefix_cache_info().enabled);
    }

    // keys left unset take the same defaults in both (the app once chose its own mode)
    std::fs::write(
        &path,
        format!("model = {:?}\n", m.join("target").display().to_string()),
    )
    .unwrap();
    let merged = Layers::load(Settings::default(), Some(&path))
        .unwrap()
        .merged();
    let serve = dspark_hub::launch::launch_spec(&merged, &NoProgress).unwrap();
    let host = Host::new(path.clone());
    let req = dspark_app::initial_load(&host);
    let app = dspark_app::loader::launch_for(&path, &req, &NoProgress).unwrap();
    assert_eq!(app, serve);
    let d = dspark_hub::layers::defaults();
    assert_eq!(app.spec.mode.as_str(), d.mode.unwrap().as_str());
    assert_eq!(Some(app.spec.keep_quantized), d.keep_quantized);
    let _ = std::fs::remove_dir_all(dir);
}
