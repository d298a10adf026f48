//! The CPU baseline the build was compiled for, and whether this CPU has it.
//!
//! Builds target x86-64-v3 (`.cargo/config.toml`: AVX2, FMA, F16C, BMI1/2, MOVBE, XSAVE), because
//! candle's quantised dot products compile their SIMD paths only with `avx2` enabled at build time.
//! Such a binary may execute AVX2 anywhere, so the check reads CPUID itself: std's
//! `is_x86_feature_detected!` answers "yes" at compile time for every feature the build enables,
//! which is exactly the question this module must not assume. Imports nothing of the crate.
//!
//! ```
//! let b = ragbox_core::model::cpu::baseline();
//! assert!(b.missing.is_empty() || !b.missing.is_empty()); // a report, on any CPU
//! ```

use serde::Serialize;

/// What the build requires and what this CPU lacks.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    /// The target the build was compiled for, e.g. `x86-64-v3`.
    pub target: &'static str,
    /// The instruction sets that target implies, as checked here.
    pub required: Vec<&'static str>,
    /// Those this CPU (or its operating system) does not provide; empty when it can run the build.
    pub missing: Vec<&'static str>,
}

impl Baseline {
    /// The message for a CPU that cannot run this build, or `None`.
    pub fn refusal(&self) -> Option<String> {
        (!self.missing.is_empty()).then(|| {
            format!(
                "this ragbox build needs an {} CPU ({}); this CPU lacks {}. Rebuild for it: \
                 remove the rustflags line from .cargo/config.toml (or set RUSTFLAGS=\"-C target-cpu=native\") \
                 and run `cargo build --release` (quantised LLM kernels then run without SIMD: much slower)",
                self.target,
                self.required.join(", "),
                self.missing.join(", ")
            )
        })
    }
}

/// The build's baseline and this CPU's standing against it.
#[cfg(target_arch = "x86_64")]
pub fn baseline() -> Baseline {
    use std::arch::x86_64::__cpuid_count;
    let mut required = Vec::new();
    let mut missing = Vec::new();
    let v3 = cfg!(target_feature = "avx2");
    // CPUID exists on every x86-64 CPU (safe to call since Rust 1.87).
    let (leaf1, leaf7, ext1) = (__cpuid_count(1, 0), __cpuid_count(7, 0), __cpuid_count(0x8000_0001, 0));
    let os_saves_ymm = leaf1.ecx & (1 << 27) != 0 && {
        // SAFETY: XGETBV exists when OSXSAVE (CPUID.1:ECX.27) is set, checked just before.
        let xcr0 = unsafe { xgetbv0() };
        xcr0 & 0b110 == 0b110
    };
    let mut check = |name: &'static str, wanted: bool, present: bool| {
        if wanted {
            required.push(name);
            if !present {
                missing.push(name);
            }
        }
    };
    check("avx", cfg!(target_feature = "avx"), leaf1.ecx & (1 << 28) != 0 && os_saves_ymm);
    check("avx2", cfg!(target_feature = "avx2"), leaf7.ebx & (1 << 5) != 0 && os_saves_ymm);
    check("fma", cfg!(target_feature = "fma"), leaf1.ecx & (1 << 12) != 0);
    check("f16c", cfg!(target_feature = "f16c"), leaf1.ecx & (1 << 29) != 0);
    check("bmi1", cfg!(target_feature = "bmi1"), leaf7.ebx & (1 << 3) != 0);
    check("bmi2", cfg!(target_feature = "bmi2"), leaf7.ebx & (1 << 8) != 0);
    check("lzcnt", cfg!(target_feature = "lzcnt"), ext1.ecx & (1 << 5) != 0);
    check("movbe", cfg!(target_feature = "movbe"), leaf1.ecx & (1 << 22) != 0);
    Baseline { target: if v3 { "x86-64-v3" } else { "x86-64" }, required, missing }
}

/// XCR0, the register that says which vector states the operating system saves.
#[cfg(target_arch = "x86_64")]
unsafe fn xgetbv0() -> u64 {
    let (eax, edx): (u32, u32);
    // SAFETY (caller): OSXSAVE is set. Plain asm, so this needs no target feature.
    std::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") eax, out("edx") edx, options(nomem, nostack, preserves_flags));
    (u64::from(edx) << 32) | u64::from(eax)
}

/// Other architectures: the build's own target, nothing checked at run time.
#[cfg(not(target_arch = "x86_64"))]
pub fn baseline() -> Baseline {
    Baseline { target: std::env::consts::ARCH, required: Vec::new(), missing: Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_runs_its_own_build() {
        let b = baseline();
        // The tests are running, so the CPU executes this build's instructions.
        assert!(b.missing.is_empty(), "{:?}", b.refusal());
        assert!(b.refusal().is_none());
        if cfg!(all(target_arch = "x86_64", target_feature = "avx2")) {
            assert_eq!(b.target, "x86-64-v3");
            assert!(b.required.contains(&"avx2") && b.required.contains(&"fma"));
        }
    }

    #[test]
    fn a_missing_feature_is_refused_with_the_fix() {
        let b = Baseline { target: "x86-64-v3", required: vec!["avx2", "fma"], missing: vec!["avx2"] };
        let msg = b.refusal().expect("refused");
        assert!(msg.contains("lacks avx2") && msg.contains(".cargo/config.toml"), "{msg}");
    }
}
