compile_error!("mistralrs-core 0.8.1 is built from the patched copy that scripts/setup/patch-crates.sh makes (patches/README.md): run scripts/setup/patch-crates.sh once, then build again");
