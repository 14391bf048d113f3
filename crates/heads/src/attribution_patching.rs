//! Attribution patching (Nanda 2023; Syed, Rager and Conmy 2023): the first-order estimate of
//! every activation patch at once. Putting the clean run's activation `a_clean` into the
//! corrupted run where it had `a_corrupted` moves the metric by about
//! `(a_clean - a_corrupted) . dM/da`, the gradient taken on the corrupted run. Two forward
//! passes (clean, corrupted) and one backward pass estimate every site that
//! [`patch_sweeps`](crate::patch_sweeps) patches with a forward pass each.
//!
//! The gradients come from zero tensors added at every site ([`BlockDeltas`]) that require
//! gradients: the corrupted run's forward pass is unchanged, and one backward pass gives the
//! metric's gradient with respect to each site. The estimate is exact where the metric is
//! linear in the patched activation (a head feeding the logits through no LayerNorm) and
//! drifts from the exact patch as nonlinearities (softmax, LayerNorm, GELU) sit between.

use burn::tensor::{Device, Tensor};
use headlab_kernels::to_host;
use headlab_model::{BlockDeltas, ForwardOptions, Gpt};

use crate::patching::{
    Metric, PatchError, Patching, Sites, Sweep, batch, check, metric_of, metric_tensor,
};

/// `sum over the last `width` values` of `(clean - corrupted) * grad`, one sum per leading
/// index: the first-order change of the metric when each row (a position, or a head's
/// positions together) is patched.
fn dot_rows(clean: Vec<f32>, corrupted: Vec<f32>, grad: Vec<f32>, width: usize) -> Vec<f64> {
    clean
        .chunks(width)
        .zip(corrupted.chunks(width))
        .zip(grad.chunks(width))
        .map(|((c, k), g)| {
            c.iter()
                .zip(k)
                .zip(g)
                .map(|((&c, &k), &g)| (f64::from(c) - f64::from(k)) * f64::from(g))
                .sum()
        })
        .collect()
}

/// The first-order estimate of every sweep [`crate::patch_sweeps`] measures, in the same
/// shape: `metric` is the corrupted run's metric plus the estimated change, `restored` the
/// estimate's share of the clean-minus-corrupted gap.
pub fn attribution_sweeps(
    model: &Gpt,
    clean: &[u32],
    corrupted: &[u32],
    metric: Metric,
    device: &Device,
) -> Result<Patching, PatchError> {
    check(model, clean, corrupted, metric)?;
    let c = &model.config;
    let (layers, heads, t, d, d_k) = (c.n_layers, c.n_heads, clean.len(), c.d_model, c.d_k());
    let clean_run = model.forward_with(batch(clean, device), Sites::options());
    let clean_metric = metric_of(clean_run.logits.clone(), metric);
    let clean_sites = Sites::of(model, clean_run);

    // The corrupted run on an autodiff device, with zeros added at every site.
    let autodiff = &device.clone().autodiff();
    let graph = model.differentiable();
    let deltas: Vec<BlockDeltas> = (0..layers)
        .map(|_| BlockDeltas {
            resid_pre: Tensor::zeros([1, t, d], autodiff).require_grad(),
            head: Tensor::zeros([1, heads, t, d_k], autodiff).require_grad(),
            attn_out: Tensor::zeros([1, t, d], autodiff).require_grad(),
            mlp_out: Tensor::zeros([1, t, d], autodiff).require_grad(),
        })
        .collect();
    let options = ForwardOptions {
        deltas: Some(deltas.clone()),
        ..Sites::options()
    };
    let run = graph.forward_with(batch(corrupted, autodiff), options);
    let value = metric_tensor(run.logits.clone(), metric);
    let corrupted_metric = f64::from(to_host::<f32, _>(value.clone())[0]);
    if clean_metric == corrupted_metric {
        return Err(PatchError::NoDifference(clean_metric));
    }
    let corrupted_sites = Sites::of(&graph, run);
    let grads = value.backward();
    let grad3 = |x: &Tensor<3>| to_host::<f32, _>(x.grad(&grads).expect("every delta is used"));
    let grad4 = |x: &Tensor<4>| to_host::<f32, _>(x.grad(&grads).expect("every delta is used"));
    let host3 = |x: &Tensor<3>| to_host::<f32, _>(x.clone());
    let host4 = |x: &Tensor<4>| to_host::<f32, _>(x.clone());

    let gap = clean_metric - corrupted_metric;
    let sweep = |site: &'static str, columns: usize, estimate: Vec<f64>| Sweep {
        site,
        layers,
        columns,
        restored: estimate.iter().map(|e| e / gap).collect(),
        metric: estimate.iter().map(|e| corrupted_metric + e).collect(),
    };
    let by_position =
        |clean: &[Tensor<3>], corrupted: &[Tensor<3>], delta: &dyn Fn(usize) -> Vec<f32>| {
            (0..clean.len())
                .flat_map(|l| dot_rows(host3(&clean[l]), host3(&corrupted[l]), delta(l), d))
                .collect::<Vec<f64>>()
        };
    let mut sweeps = vec![
        sweep(
            "resid_pre",
            t,
            by_position(&clean_sites.resid_pre, &corrupted_sites.resid_pre, &|l| {
                grad3(&deltas[l].resid_pre)
            }),
        ),
        sweep(
            "attn_out",
            t,
            by_position(&clean_sites.attn_out, &corrupted_sites.attn_out, &|l| {
                grad3(&deltas[l].attn_out)
            }),
        ),
    ];
    if clean_sites.mlp_out.len() == layers {
        sweeps.push(sweep(
            "mlp_out",
            t,
            by_position(&clean_sites.mlp_out, &corrupted_sites.mlp_out, &|l| {
                grad3(&deltas[l].mlp_out)
            }),
        ));
    }
    // [1, n_heads, t, d_k]: a head's rows are contiguous, so one sum per head covers its
    // every position, as patching a head does.
    let head: Vec<f64> = (0..layers)
        .flat_map(|l| {
            dot_rows(
                host4(&clean_sites.head[l]),
                host4(&corrupted_sites.head[l]),
                grad4(&deltas[l].head),
                t * d_k,
            )
        })
        .collect();
    sweeps.push(sweep("head", heads, head));
    Ok(Patching {
        clean: clean_metric,
        corrupted: corrupted_metric,
        sweeps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch_sweeps;
    use burn::module::Param;
    use headlab_model::{GptConfig, PatchSite};

    fn model(config: GptConfig, seed: u64) -> (Gpt, Device) {
        let device = Device::flex();
        device.seed(seed);
        (Gpt::new(&config, &device).unwrap(), device)
    }

    const CLEAN: [u32; 6] = [1, 4, 2, 7, 3, 5];
    const CORRUPTED: [u32; 6] = [1, 4, 9, 7, 3, 6];

    /// Every estimate equals the metric's derivative along the clean-minus-corrupted
    /// direction, taken by central finite differences: site `a` set to
    /// `a_corrupted + e (a_clean - a_corrupted)` through the patching hook, at `e = +-h`.
    #[test]
    fn estimates_are_the_derivative_along_clean_minus_corrupted() {
        let config = GptConfig {
            vocab_size: 11,
            block_size: 8,
            d_model: 16,
            n_layers: 2,
            n_heads: 2,
            ..GptConfig::default()
        };
        let (mut model, device) = model(config, 5);
        // Larger logits and sharper attention than at initialisation, so the metric moves by
        // whole units and the softmax's curvature is there to be followed.
        model.wte.weight = Param::from_tensor(model.wte.weight.val().mul_scalar(30.0));
        for block in &mut model.blocks {
            let attn = &mut block.attn;
            for proj in [&mut attn.q_proj, &mut attn.k_proj] {
                proj.weight = Param::from_tensor(proj.weight.val().mul_scalar(5.0));
            }
        }
        for metric in [
            Metric::LogitDiff {
                answer: 2,
                versus: 9,
            },
            Metric::LogProb { answer: 2 },
        ] {
            let estimate = attribution_sweeps(&model, &CLEAN, &CORRUPTED, metric, &device).unwrap();
            let sites = |tokens: &[u32]| {
                Sites::of(
                    &model,
                    model.forward_with(batch(tokens, &device), Sites::options()),
                )
            };
            let (clean, corrupted) = (sites(&CLEAN), sites(&CORRUPTED));
            let h = 1e-2;
            let along = |layer: usize, site: &dyn Fn(f64) -> PatchSite| {
                let at = |e: f64| {
                    let options = ForwardOptions {
                        patch: Some((layer, site(e))),
                        ..ForwardOptions::default()
                    };
                    metric_of(
                        model
                            .forward_with(batch(&CORRUPTED, &device), options)
                            .logits,
                        metric,
                    )
                };
                (at(h) - at(-h)) / (2.0 * h)
            };
            let mix3 =
                |c: &Tensor<3>, k: &Tensor<3>, e: f64| k.clone() + (c.clone() - k.clone()) * e;
            let mix4 =
                |c: &Tensor<4>, k: &Tensor<4>, e: f64| k.clone() + (c.clone() - k.clone()) * e;
            let mut checked = 0;
            for sweep in &estimate.sweeps {
                for l in 0..sweep.layers {
                    for col in 0..sweep.columns {
                        let fd = match sweep.site {
                            "resid_pre" => along(l, &|e| PatchSite::ResidPre {
                                position: col,
                                value: mix3(&clean.resid_pre[l], &corrupted.resid_pre[l], e),
                            }),
                            "attn_out" => along(l, &|e| PatchSite::Attention {
                                position: col,
                                value: mix3(&clean.attn_out[l], &corrupted.attn_out[l], e),
                            }),
                            "mlp_out" => along(l, &|e| PatchSite::Mlp {
                                position: col,
                                value: mix3(&clean.mlp_out[l], &corrupted.mlp_out[l], e),
                            }),
                            "head" => along(l, &|e| PatchSite::Head {
                                head: col,
                                value: mix4(&clean.head[l], &corrupted.head[l], e),
                            }),
                            other => panic!("unexpected site {other}"),
                        };
                        let first_order =
                            sweep.metric[l * sweep.columns + col] - estimate.corrupted;
                        assert!(
                            (fd - first_order).abs() <= 3e-3 * (1.0 + fd.abs()),
                            "{metric:?} {} layer {l} column {col}: finite differences {fd}, \
                             attribution {first_order}",
                            sweep.site
                        );
                        checked += 1;
                    }
                }
            }
            // resid_pre, attn_out, mlp_out: 2 layers x 6 positions; heads: 2 x 2.
            assert_eq!(checked, 3 * 12 + 4);
        }
    }

    /// Where the metric is linear in the patched activation, the first-order estimate is the
    /// patch: a one-layer attention-only model without its final LayerNorm reads each head's
    /// output and the attention output straight into the logits, so there attribution equals
    /// exact patching (while the stream entering the layer goes through the softmax, and
    /// does not).
    #[test]
    fn equals_exact_patching_where_the_metric_is_linear_in_the_site() {
        let config = GptConfig {
            vocab_size: 11,
            block_size: 8,
            d_model: 16,
            n_layers: 1,
            n_heads: 4,
            attn_only: true,
            ..GptConfig::default()
        };
        let (mut model, device) = model(config, 8);
        model.ln_f = None;
        // Sharper attention than at initialisation, so the softmax's curvature shows.
        let attn = &mut model.blocks[0].attn;
        for proj in [&mut attn.q_proj, &mut attn.k_proj] {
            proj.weight = Param::from_tensor(proj.weight.val().mul_scalar(20.0));
        }
        let metric = Metric::LogitDiff {
            answer: 2,
            versus: 9,
        };
        let exact = patch_sweeps(&model, &CLEAN, &CORRUPTED, metric, &device).unwrap();
        let estimate = attribution_sweeps(&model, &CLEAN, &CORRUPTED, metric, &device).unwrap();
        assert!((exact.clean - estimate.clean).abs() < 1e-5);
        assert!((exact.corrupted - estimate.corrupted).abs() < 1e-4);
        // The largest difference where the softmax stands between (the stream entering the
        // layer): not zero, whatever weights the shared random generator gave this model.
        let mut nonlinear_apart = 0.0f64;
        for (e, a) in exact.sweeps.iter().zip(&estimate.sweeps) {
            assert_eq!((e.site, e.layers, e.columns), (a.site, a.layers, a.columns));
            // Shares of the gap, which is small in a model at initialisation.
            for (x, y) in e.restored.iter().zip(&a.restored) {
                if matches!(e.site, "head" | "attn_out") {
                    assert!((x - y).abs() < 1e-4, "{}: {x} vs {y}", e.site);
                } else {
                    nonlinear_apart = nonlinear_apart.max((x - y).abs());
                }
            }
        }
        assert!(
            nonlinear_apart > 1e-6,
            "the stream before the softmax should not be linear: {nonlinear_apart}"
        );
    }
}
