compile_error!("candle-core 0.10.2 is built from the patched copy that scripts/setup/patch-crates.sh makes (patches/README.md): run scripts/setup/patch-crates.sh once, then build again");
