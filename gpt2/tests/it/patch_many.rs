//! `forward_logits_patched_many`: identity patches leave the forward unchanged, two patches act as the
//! same patches applied one after the other, and a bad hook point is refused.
use crate::common;

use candle_core::{DType, Device, Tensor};
use common::max_abs_diff;
use gpt2::{Gpt2, HookPoint};
use runtime::test_device;
use std::cell::RefCell;

fn model(device: &Device) -> Gpt2 {
    let dir = runtime::workspace_file("gpt2/tests/fixtures/gpt2-ref");
    Gpt2::load(dir.to_str().unwrap(), DType::F32, device).unwrap()
}

/// Two contexts of 12 tokens of the fixture's 96-token vocabulary.
fn tokens(device: &Device) -> Tensor {
    let t: Vec<u32> = (0..24u32).map(|i| (i * 37 + 5) % 96).collect();
    Tensor::from_vec(t, (2, 12), device).unwrap()
}

test_device!(
    identity_patches_equal_the_clean_forward,
    identity_patches_equal_the_clean_forward_on
);
fn identity_patches_equal_the_clean_forward_on(device: &Device) -> anyhow::Result<()> {
    let device = device.clone();
    let (m, t) = (model(&device), tokens(&device));
    let clean = m.forward_logits(&t).unwrap();
    let id = |x: &Tensor| Ok(x.clone());
    let patches: Vec<(HookPoint, gpt2::Patch)> = vec![
        (HookPoint::ResidPre(0), &id),
        (HookPoint::ResidPost(0), &id),
        (HookPoint::ResidPre(1), &id),
        (HookPoint::ResidPost(1), &id),
        (HookPoint::LnFinal, &id),
    ];
    let patched = m.forward_logits_patched_many(&t, &patches).unwrap();
    assert_eq!(max_abs_diff(&clean, &patched), 0.0, "{device:?}");
    let none = m.forward_logits_patched_many(&t, &[]).unwrap();
    assert_eq!(max_abs_diff(&clean, &none), 0.0, "{device:?}");
    Ok(())
}

test_device!(
    two_hooks_equal_the_patches_in_sequence,
    two_hooks_equal_the_patches_in_sequence_on
);
fn two_hooks_equal_the_patches_in_sequence_on(device: &Device) -> anyhow::Result<()> {
    let device = device.clone();
    let (m, t) = (model(&device), tokens(&device));
    let (first, second) = (HookPoint::ResidPost(0), HookPoint::ResidPost(1));
    let f = |x: &Tensor| x.affine(0.5, 0.25);
    let g = |x: &Tensor| x.tanh()?.affine(3.0, 0.0);
    let both = m
        .forward_logits_patched_many(&t, &[(first, &f), (second, &g)])
        .unwrap();

    // By hand: the stream at `second` with only `f` applied (recorded by an identity patch that must not
    // change the logits), then `g` of it put in place at `second` alone.
    let seen = RefCell::new(None);
    let record = |x: &Tensor| {
        *seen.borrow_mut() = Some(x.clone());
        Ok(x.clone())
    };
    let f_only = m.forward_logits_patched(&t, first, &f).unwrap();
    let f_recorded = m
        .forward_logits_patched_many(&t, &[(first, &f), (second, &record)])
        .unwrap();
    assert_eq!(max_abs_diff(&f_only, &f_recorded), 0.0, "{device:?}");
    let after_f = seen.borrow_mut().take().unwrap();
    let clean_second = m.forward_hooks(&t, &[second]).unwrap().remove(0);
    assert!(
        max_abs_diff(&after_f, &clean_second) > 1e-3,
        "{device:?}: the first patch did not reach the second hook point"
    );
    let replaced = g(&after_f).unwrap();
    let put = |_: &Tensor| Ok(replaced.clone());
    let by_hand = m.forward_logits_patched(&t, second, &put).unwrap();
    assert!(max_abs_diff(&both, &by_hand) < 1e-5, "{device:?}");

    // Each patch on its own differs from both together: neither one was dropped.
    let g_only = m.forward_logits_patched(&t, second, &g).unwrap();
    assert!(max_abs_diff(&both, &f_only) > 1e-3, "{device:?}");
    assert!(max_abs_diff(&both, &g_only) > 1e-3, "{device:?}");

    // Two patches of one hook point apply in list order: g after f equals their composition.
    let gf = |x: &Tensor| g(&f(x)?);
    let stacked = m
        .forward_logits_patched_many(&t, &[(first, &f), (first, &g)])
        .unwrap();
    let composed = m.forward_logits_patched(&t, first, &gf).unwrap();
    assert_eq!(max_abs_diff(&stacked, &composed), 0.0, "{device:?}");
    let fg = |x: &Tensor| f(&g(x)?);
    let reversed = m.forward_logits_patched(&t, first, &fg).unwrap();
    assert!(max_abs_diff(&stacked, &reversed) > 1e-3, "{device:?}");
    Ok(())
}

#[test]
fn a_patch_past_the_last_layer_is_refused() {
    let (m, t) = (model(&Device::Cpu), tokens(&Device::Cpu));
    let id = |x: &Tensor| Ok(x.clone());
    let err = m
        .forward_logits_patched_many(
            &t,
            &[
                (HookPoint::ResidPost(0), &id),
                (HookPoint::ResidPost(2), &id),
            ],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("resid_post") || err.contains("2"), "{err}");
    assert!(err.contains("layers"), "{err}");
}
