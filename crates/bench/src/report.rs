//! `headlab-bench`'s markdown report, from its JSON results: one table per section, with
//! PyTorch's figure and headlab / PyTorch where the reference ran.

use serde_json::Value;

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn median_ms(v: &Value) -> f64 {
    num(&v["timing"]["median_ms"])
}

/// `median (min-max)`.
fn ms_cell(v: &Value) -> String {
    let t = &v["timing"];
    format!(
        "{:.2} ({:.2}-{:.2})",
        num(&t["median_ms"]),
        num(&t["min_ms"]),
        num(&t["max_ms"])
    )
}

fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".into()
    }
}

fn rows<'a>(out: &'a Value, section: &str) -> impl Iterator<Item = &'a Value> {
    out[section].as_array().into_iter().flatten()
}

/// The whole report: the setup, then each section.
pub fn bench_markdown(out: &Value) -> String {
    let torch = &out["torch"]["environment"];
    let has_torch = !torch.is_null();
    let flags: Vec<&str> = out["cpu"]["flags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut s = format!(
        "# headlab benchmarks, {} on {}\n\n{} cores of {} ({}; flags: {}), RAYON_NUM_THREADS={}{}{}. \
         Times are medians of criterion's samples (min-max in brackets), but for the training \
         step (its own rule, below).\n\nCommand: `{}`. Commit {}, headlab {}, {}, Burn {}.\n",
        out["date"].as_str().unwrap_or("?"),
        out["host"].as_str().unwrap_or("?"),
        out["cores"],
        match (
            out["cpu"]["family"].as_str(),
            out["cpu"]["model_number"].as_str()
        ) {
            (Some(f), Some(m)) => format!(
                "{}, family {f} model {m}",
                out["cpu"]["model"].as_str().unwrap_or("an unrecorded CPU")
            ),
            _ => out["cpu"]["model"]
                .as_str()
                .unwrap_or("an unrecorded CPU")
                .to_string(),
        },
        out["cpu"]["simd"].as_str().unwrap_or("?"),
        if flags.is_empty() {
            "unrecorded".to_string()
        } else {
            flags.join(" ")
        },
        out["threads"].as_str().unwrap_or("unset"),
        if has_torch {
            format!(
                ", PyTorch {} with {} threads{}",
                torch["torch"].as_str().unwrap_or("?"),
                torch["threads"],
                torch["cpu_capability"]
                    .as_str()
                    .map_or(String::new(), |c| format!(" (ATen's {c} kernels)"))
            )
        } else {
            String::new()
        },
        if out["quick"] == true {
            " (quick: small sizes, short runs, a harness check)"
        } else {
            ""
        },
        out["command"].as_str().unwrap_or("unrecorded"),
        out["commit"].as_str().unwrap_or("unrecorded"),
        out["versions"]["headlab"].as_str().unwrap_or("?"),
        out["versions"]["rustc"]
            .as_str()
            .unwrap_or("rustc unrecorded"),
        out["versions"]["burn"].as_str().unwrap_or("unrecorded"),
    );
    for (backend, why) in out["unavailable"].as_object().into_iter().flatten() {
        s += &format!("\n{backend} was not available: {why}\n");
    }
    s += &matmul_section(out);
    s += &attention_section(out);
    s += &heads_section(out);
    s += &train_step_section(out);
    s += &generation_section(out);
    s += &recipe_section(out);
    s += &torch_environment(&out["train_step"]["torch_environment"]);
    s
}

/// The matmul peaks, headlab's and PyTorch's.
fn matmul_section(out: &Value) -> String {
    let torch = &out["torch"];
    let mut s = String::new();
    let torch_peak = torch["matmul"][0]["gflops"].as_f64();
    s += "\n## Matmul peak (square f32 matmul)\n\n`burn` is the backend's `matmul`, `headlab` the kernels' `linear` (the gemm crate on the backend's buffers, what the training step's layers run). MFU below divides by the FMA peak instead, the same for every column.\n\n| backend | kernel | n | ms | GFLOP/s |\n|---|---|---|---|---|\n";
    for r in rows(out, "matmul") {
        s += &format!(
            "| {} | {} | {} | {} | {:.1} |\n",
            r["backend"].as_str().unwrap_or("?"),
            r["kernel"].as_str().unwrap_or("burn"),
            r["n"],
            ms_cell(r),
            num(&r["gflops"])
        );
    }
    if let Some(p) = torch_peak {
        s += &format!(
            "| PyTorch | torch.matmul | {} | {} | {p:.1} |\n",
            torch["matmul"][0]["n"],
            ms_cell(&torch["matmul"][0])
        );
    }
    s
}

/// The attention op, forward and backward, against PyTorch's SDPA.
fn attention_section(out: &Value) -> String {
    let torch = &out["torch"];
    let mut s = String::new();
    s += "\n## Attention op: softmax(Q K^T / sqrt(d_k) + causal mask) V\n\nPyTorch's `scaled_dot_product_attention` is fused in both directions. headlab: `naive` is Burn's ops (the reference), `fused` the backend's kernel (forward only: Burn's autodiff replaces it with the naive ops), `flash` headlab's CPU kernel with its own backward, what training uses on flex and ndarray.\n\n| backend | pass | kernel | b x h x d_k | T | ms | tokens/s | GFLOP/s | peak MiB | PyTorch SDPA ms | headlab / SDPA |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
    for r in rows(out, "attention") {
        let reference = rows(torch, "attention").find(|t| {
            t["pass"] == r["pass"] && t["t"] == r["t"] && t["b"] == r["b"] && t["h"] == r["h"]
        });
        let t_ms = reference.map_or(f64::NAN, median_ms);
        s += &format!(
            "| {} | {} | {} | {}x{}x{} | {} | {} | {:.0} | {:.1} | {} | {} | {} |\n",
            r["backend"].as_str().unwrap_or("?"),
            r["pass"].as_str().unwrap_or("?"),
            r["kernel"].as_str().unwrap_or("?"),
            r["b"],
            r["h"],
            r["d_k"],
            r["t"],
            ms_cell(r),
            num(&r["tokens_per_s"]),
            num(&r["gflops"]),
            r["peak_mib"]
                .as_f64()
                .map_or("-".into(), |m| format!("{m:.0}")),
            if t_ms.is_finite() {
                format!("{t_ms:.2}")
            } else {
                "-".into()
            },
            ratio(median_ms(r), t_ms),
        );
    }
    s
}

/// All heads batched against the per-head loop.
fn heads_section(out: &Value) -> String {
    let mut s = String::new();
    s += "\n## All heads in one batched matmul vs the per-head loop (b 1, d_model 128)\n\n| backend | heads | d_k | T | batched ms | loop ms | loop / batched |\n|---|---|---|---|---|---|---|\n";
    for r in rows(out, "heads").filter(|r| r["mode"] == "batched") {
        let looped = rows(out, "heads")
            .find(|l| l["mode"] == "loop" && l["backend"] == r["backend"] && l["h"] == r["h"]);
        let l_ms = looped.map_or(f64::NAN, median_ms);
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r["backend"].as_str().unwrap_or("?"),
            r["h"],
            r["d_k"],
            r["t"],
            ms_cell(r),
            looped.map_or("-".into(), ms_cell),
            ratio(l_ms, median_ms(r)),
        );
    }
    s
}

/// Whether a ratio's range across rounds shows a difference: only when every round agrees.
pub fn verdict(min: f64, max: f64) -> &'static str {
    if !(min.is_finite() && max.is_finite()) {
        "-"
    } else if max < 1.0 {
        "headlab faster"
    } else if min > 1.0 {
        "headlab slower"
    } else {
        "level"
    }
}

/// The median of `v` and its min-max, over its finite values (NaN when none): the bench's
/// timings and this report's ratios share it.
pub fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    };
    (median, v[0], v[n - 1])
}

/// PyTorch at its best: in each round, the fastest of its columns, f32 and bf16 autocast.
const TORCH_BEST: &str = "torch best";

/// Whether a column's products run in bf16 (flex-bf16, PyTorch's autocast modes): its MFU
/// divides by the bf16 peak.
fn is_bf16(column: &str) -> bool {
    column.ends_with("-bf16")
}

/// Each round's median of `column`, by round number.
fn round_medians(step: &Value, shape: &str, threads: u64, column: &str) -> Vec<(u64, f64)> {
    let rows = step["rows"].as_array().into_iter().flatten();
    let of = |c: &str| -> Vec<(u64, f64)> {
        rows.clone()
            .filter(|r| r["shape"] == shape && r["threads"] == threads && r["column"] == c)
            .filter_map(|r| Some((r["round"].as_u64()?, r["timing"]["median_ms"].as_f64()?)))
            .collect()
    };
    if column != TORCH_BEST {
        return of(column);
    }
    let mut torch: Vec<String> = Vec::new();
    for r in rows.clone() {
        let c = r["column"].as_str().unwrap_or("");
        if c.starts_with("torch ") && !torch.iter().any(|t| t == c) {
            torch.push(c.to_string());
        }
    }
    let columns: Vec<Vec<(u64, f64)>> = torch.iter().map(|c| of(c)).collect();
    let rounds = step["rounds"].as_u64().unwrap_or(0);
    (1..=rounds)
        .filter_map(|round| {
            let best = columns
                .iter()
                .filter_map(|v| v.iter().find(|(r, _)| *r == round).map(|p| p.1))
                .min_by(f64::total_cmp)?;
            Some((round, best))
        })
        .collect()
}

/// headlab / PyTorch per round (rounds where both ran), as median (min-max).
fn round_ratios(step: &Value, shape: &str, threads: u64, ours: &str, theirs: &str) -> Vec<f64> {
    let theirs = round_medians(step, shape, threads, theirs);
    round_medians(step, shape, threads, ours)
        .into_iter()
        .filter_map(|(round, a)| {
            let b = theirs.iter().find(|(r, _)| *r == round)?.1;
            Some(a / b)
        })
        .collect()
}

fn range_cell((median, min, max): (f64, f64, f64)) -> String {
    if median.is_finite() {
        format!("{median:.2} ({min:.2}-{max:.2})")
    } else {
        "-".into()
    }
}

/// The training step, headlab's backends against PyTorch's modes, from interleaved rounds.
// Over 80 lines on purpose: one markdown section written top to bottom from the same rows and medians.
fn train_step_section(out: &Value) -> String {
    let step = &out["train_step"];
    let mut s = String::from(
        "\n## Training step: forward, backward, clip, AdamW, in interleaved rounds\n\n",
    );
    if step.is_null() {
        s += "Not run.\n";
        return s;
    }
    // `[{threads, gflops}]` as pairs.
    let parse = |peaks: &Value| -> Vec<(u64, f64)> {
        peaks
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| Some((p["threads"].as_u64()?, p["gflops"].as_f64()?)))
            .collect()
    };
    let (peaks, bf16_peaks) = (parse(&step["fma_peak"]), parse(&step["bf16_peak"]));
    let of =
        |peaks: &[(u64, f64)], n: u64| peaks.iter().find(|p| p.0 == n).map_or(f64::NAN, |p| p.1);
    // On a GPU machine the accelerator's columns divide by its published fp32 peak instead
    // (its bf16 columns get no MFU: that peak is not theirs).
    let device_peak = out["device_peak"]["gflops"].as_f64();
    let torch_on_device = step["torch_device"].as_str().is_some_and(|d| d != "cpu");
    let on_device = |c: &str| c == "wgpu" || (torch_on_device && c.starts_with("torch "));
    let peak_for = |n: u64, c: &str| match device_peak {
        Some(_) if on_device(c) && is_bf16(c) => f64::NAN,
        Some(g) if on_device(c) => g,
        _ if is_bf16(c) => of(&bf16_peaks, n),
        _ => of(&peaks, n),
    };
    let peak_text = |peaks: &[(u64, f64)]| {
        peaks
            .iter()
            .map(|(n, g)| format!("{g:.0} GFLOP/s on {n} thread(s)"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    s += &format!(
        "{} rounds. In each round every column runs once: headlab's backends in a worker \
         process (flex-bf16: flex with `train.precision = \"bf16\"`), then PyTorch's modes \
         in bench/reference/bench.py (eager: default AdamW; fused: `AdamW(fused=True)`; \
         compile: `torch.compile` of model and loss with the fused AdamW; -bf16: the same under \
         `torch.autocast(device, torch.bfloat16)` around the loss). ms: the median over \
         rounds of each round's median step (min-max of the round medians). MFU: the model's \
         FLOPs (nanoGPT's `6 N + 12 L d T` per token) per second over the peak of the \
         column's precision on as many threads: for f32 a register-resident FMA loop at {} \
         ({} accumulators), {}",
        step["rounds"],
        step["fma"]["isa"].as_str().unwrap_or("?"),
        step["fma"]["accumulators"],
        peak_text(&peaks),
    );
    // Records made before the bf16 columns have no `bf16_peak` key (and no bf16 columns).
    s += &if step.get("bf16_peak").is_none() {
        ".\n".to_string()
    } else if bf16_peaks.is_empty() {
        "; this CPU has no AVX512-BF16, so the bf16 columns get no MFU.\n".to_string()
    } else {
        format!(
            "; for bf16 a register-resident `vdpbf16ps` loop (two multiply-adds per f32 lane), \
             {} (on a CPU with AMX, PyTorch's bf16 products can pass it).\n",
            peak_text(&bf16_peaks)
        )
    };
    if let Some(g) = device_peak {
        s += &format!(
            "\nThe wgpu column{} divide{} by the accelerator's published fp32 peak instead: \
             {:.0} GFLOP/s ({}).\n",
            if torch_on_device {
                " and PyTorch's (on CUDA)"
            } else {
                ""
            },
            if torch_on_device { "" } else { "s" },
            g,
            out["device_peak"]["name"].as_str().unwrap_or("?")
        );
    }
    let threads: Vec<u64> = step["threads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect();
    for shape in step["shapes"].as_array().into_iter().flatten() {
        let name = shape["shape"].as_str().unwrap_or("?");
        let flops = num(&shape["flops_per_step"]);
        s += &format!(
            "\n### {name}: {} ({:.2} GFLOP per step)\n\n| threads | column | ms (min-max over \
             rounds) | GFLOP/s | MFU (of its precision's peak) |\n|---|---|---|---|---|\n",
            shape["config"].as_str().unwrap_or("?"),
            flops / 1e9
        );
        let mut columns: Vec<String> = Vec::new();
        for r in step["rows"].as_array().into_iter().flatten() {
            let c = r["column"].as_str().unwrap_or("?").to_string();
            if r["shape"] == name && !columns.contains(&c) {
                columns.push(c);
            }
        }
        let mut errors = Vec::new();
        for &n in &threads {
            for c in &columns {
                let (median, min, max) = spread(
                    round_medians(step, name, n, c)
                        .into_iter()
                        .map(|p| p.1)
                        .collect(),
                );
                let gflops = flops / (median * 1e-3) / 1e9;
                let mfu = 100.0 * gflops / peak_for(n, c);
                let mfu = if mfu.is_finite() {
                    format!("{mfu:.1}%")
                } else {
                    "-".into()
                };
                if median.is_finite() {
                    s += &format!(
                        "| {n} | {c} | {median:.2} ({min:.2}-{max:.2}) | {gflops:.1} | {mfu} |\n"
                    );
                } else {
                    s += &format!("| {n} | {c} | failed, see below | | |\n");
                }
                let failed = step["rows"].as_array().into_iter().flatten().filter(|r| {
                    r["shape"] == name && r["threads"] == n && r["column"] == c.as_str()
                });
                for e in failed.filter_map(|r| r["error"].as_str()) {
                    let e = format!("{c}, {n} thread(s): {e}");
                    if !errors.contains(&e) {
                        errors.push(e);
                    }
                }
            }
        }
        for e in &errors {
            s += &format!("\nFailed: {e}\n");
        }
        let firsts: Vec<String> = columns
            .iter()
            .filter_map(|c| {
                let ms: Vec<f64> = step["rows"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|r| r["shape"] == name && r["column"] == c.as_str())
                    .filter_map(|r| r["first_ms"].as_f64())
                    .collect();
                (!ms.is_empty()).then(|| {
                    let (median, min, max) = spread(ms);
                    format!("{c} {median:.0} ms ({min:.0}-{max:.0})")
                })
            })
            .collect();
        if !firsts.is_empty() {
            s += &format!(
                "\nFirst step of each round, not in the timings above (wgpu compiles its shaders \
                 and autotunes there; PyTorch's compile mode compiles{}): {}.\n",
                if columns.iter().any(|c| c == "flex-bf16") {
                    "; flex-bf16 runs after flex in the same worker, so its first step is warm"
                } else {
                    ""
                },
                firsts.join(", ")
            );
        }
        let mut torch_cols: Vec<&str> = columns
            .iter()
            .map(String::as_str)
            .filter(|c| c.starts_with("torch "))
            .collect();
        if torch_cols.is_empty() {
            continue;
        }
        let heads: String = torch_cols
            .iter()
            .map(|c| format!(" / {} |", c.trim_start_matches("torch ")))
            .collect();
        torch_cols.push(TORCH_BEST);
        s += &format!(
            "\nheadlab / PyTorch, one ratio per round, median (min-max); a range that crosses \
             1.0 is level. PyTorch's best is its fastest column in each round, f32 or bf16:\n\n\
             | threads | headlab |{heads} / PyTorch's best | verdict |\n|{}\n",
            "---|".repeat(torch_cols.len() + 3)
        );
        for &n in &threads {
            for ours in columns.iter().filter(|c| !c.starts_with("torch ")) {
                let cells: Vec<(f64, f64, f64)> = torch_cols
                    .iter()
                    .map(|t| spread(round_ratios(step, name, n, ours, t)))
                    .collect();
                let best = cells[cells.len() - 1];
                let ratios: String = cells
                    .iter()
                    .map(|&c| format!(" {} |", range_cell(c)))
                    .collect();
                s += &format!("| {n} | {ours} |{ratios} {} |\n", verdict(best.1, best.2));
            }
        }
    }
    s
}

/// What PyTorch ran with: version, kernels, BLAS and threading, from `torch.__config__`.
fn torch_environment(env: &Value) -> String {
    if env.is_null() {
        return String::new();
    }
    let mut s = format!(
        "\n## PyTorch's build\n\ntorch {}, ATen CPU capability {}. From `torch.__config__.show()` \
         and `parallel_info()` (in full in the JSON):\n\n",
        env["torch"].as_str().unwrap_or("?"),
        env["cpu_capability"].as_str().unwrap_or("?"),
    );
    let keys = [
        "Math Kernel Library",
        "BLAS_INFO",
        "LAPACK_INFO",
        "CPU capability",
        "OpenMP",
        "oneDNN",
        "MKL-DNN",
        "parallel backend",
    ];
    let text = format!(
        "{}\n{}",
        env["config"].as_str().unwrap_or(""),
        env["parallel_info"].as_str().unwrap_or("")
    );
    let mut seen: Vec<String> = Vec::new();
    for line in text.lines() {
        if keys.iter().any(|k| line.contains(k)) {
            // Build settings come as one long comma-separated line: keep the BLAS entries.
            let line = if line.contains("Build settings") {
                line.split(", ")
                    .filter(|p| p.contains("BLAS") || p.contains("LAPACK"))
                    .collect::<Vec<_>>()
                    .join(", ")
            } else {
                line.trim().to_string()
            };
            let line = line.trim().trim_start_matches("- ").to_string();
            if !line.is_empty() && !seen.contains(&line) {
                s += &format!("- {line}\n");
                seen.push(line);
            }
        }
    }
    s
}

/// Generation with and without the KV cache.
fn generation_section(out: &Value) -> String {
    let mut s = String::new();
    s += "\n## Generation (greedy, one prompt token, recipe dims)\n\n| backend | new tokens | with KV cache tokens/s | without tokens/s | speed-up |\n|---|---|---|---|---|\n";
    for r in rows(out, "generation").filter(|r| r["kv_cache"] == true) {
        let without = rows(out, "generation").find(|w| {
            w["kv_cache"] == false
                && w["backend"] == r["backend"]
                && w["new_tokens"] == r["new_tokens"]
        });
        let w_tok = without.map_or(f64::NAN, |w| num(&w["tokens_per_s"]));
        s += &format!(
            "| {} | {} | {:.0} | {:.0} | {} |\n",
            r["backend"].as_str().unwrap_or("?"),
            r["new_tokens"],
            num(&r["tokens_per_s"]),
            w_tok,
            ratio(num(&r["tokens_per_s"]), w_tok),
        );
    }
    s
}

/// The recipe end to end, against PyTorch's.
fn recipe_section(out: &Value) -> String {
    let torch = &out["torch"];
    let mut s = String::new();
    s += "\n## nanoGPT CPU recipe end to end (tiny-shakespeare, char)\n\n";
    let r = &out["recipe"];
    if let Some(why) = r["skipped"].as_str() {
        s += &format!("Skipped: {why}\n");
    } else {
        s += "| run | iters | val loss (200 batches) | wall ms/iter (with evaluation) | wall s |\n|---|---|---|---|---|\n";
        s += &format!(
            "| headlab {} | {} | {:.4} | {:.1} | {:.0} |\n",
            r["backend"].as_str().unwrap_or("?"),
            r["iters"],
            num(&r["val_loss"]),
            1e3 * num(&r["wall_s"]) / num(&r["iters"]),
            num(&r["wall_s"])
        );
        let t = &torch["recipe"];
        if !t.is_null() {
            s += &format!(
                "| PyTorch | {} | {:.4} | {:.1} | {:.0} |\n\nheadlab / PyTorch wall time: {}\n",
                t["iters"],
                num(&t["val_loss"]),
                1e3 * num(&t["wall_s"]) / num(&t["iters"]),
                num(&t["wall_s"]),
                ratio(num(&r["wall_s"]), num(&t["wall_s"])),
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_ratio_is_a_difference_only_when_every_round_agrees() {
        assert_eq!(verdict(0.7, 0.9), "headlab faster");
        assert_eq!(verdict(1.1, 1.3), "headlab slower");
        assert_eq!(verdict(0.9, 1.1), "level");
        assert_eq!(verdict(f64::NAN, 1.0), "-");
    }

    /// The header names the commit `cargo xtask bench` measured, and says when none was
    /// recorded (a record run by hand, or one from before the field existed).
    #[test]
    fn the_header_names_the_commit() {
        let header = |out: serde_json::Value| {
            let md = bench_markdown(&out);
            md.lines()
                .find(|l| l.starts_with("Command: "))
                .map(str::to_string)
        };
        let mut out = json!({ "command": "cargo xtask bench", "commit": "0123456789ab+dirty",
                              "versions": { "headlab": "0.2.0" } });
        let line = header(out.clone()).expect("a Command line");
        assert!(
            line.contains("Commit 0123456789ab+dirty, headlab 0.2.0"),
            "{line}"
        );
        out.as_object_mut().unwrap().remove("commit");
        let line = header(out).expect("a Command line");
        assert!(line.contains("Commit unrecorded,"), "{line}");
    }

    /// A bf16 column's MFU divides by the bf16 peak, an f32 column's by the FMA peak; without a
    /// bf16 peak (a CPU without AVX512-BF16) the bf16 column gets none.
    #[test]
    fn mfu_divides_by_the_peak_of_the_columns_precision() {
        let row = |column: &str| {
            json!({ "shape": "recipe", "threads": 1, "round": 1, "column": column,
                    "timing": { "median_ms": 10.0 } })
        };
        let mut out = json!({ "train_step": {
            "rounds": 1, "threads": [1],
            "fma": { "isa": "avx512", "accumulators": 12 },
            "fma_peak": [{ "threads": 1, "gflops": 100.0 }],
            "bf16_peak": [{ "threads": 1, "gflops": 400.0 }],
            "shapes": [{ "shape": "recipe", "config": "c", "flops_per_step": 1e9 }],
            "rows": [row("flex"), row("flex-bf16"), row("torch fused-bf16")],
        }});
        let md = train_step_section(&out);
        // 1e9 FLOP in 10 ms: 100 GFLOP/s, all of the FMA peak and a quarter of the bf16 one.
        assert!(
            md.contains("| 1 | flex | 10.00 (10.00-10.00) | 100.0 | 100.0% |"),
            "{md}"
        );
        assert!(
            md.contains("| 1 | flex-bf16 | 10.00 (10.00-10.00) | 100.0 | 25.0% |"),
            "{md}"
        );
        assert!(md.contains("| 1 | torch fused-bf16 | 10.00 (10.00-10.00) | 100.0 | 25.0% |"));
        out["train_step"]["bf16_peak"] = json!([]);
        let md = train_step_section(&out);
        assert!(
            md.contains("| 1 | flex-bf16 | 10.00 (10.00-10.00) | 100.0 | - |"),
            "{md}"
        );
        assert!(
            md.contains("| 1 | flex | 10.00 (10.00-10.00) | 100.0 | 100.0% |"),
            "{md}"
        );
    }

    /// PyTorch at its best is its fastest column in each round, f32 or bf16, not the fastest
    /// of their medians over rounds; a round where a column failed takes the others.
    #[test]
    fn pytorch_at_its_best_is_taken_round_by_round() {
        let row = |column: &str, round: u64, ms: f64| {
            json!({ "shape": "recipe", "threads": 1, "round": round, "column": column,
                    "timing": { "median_ms": ms } })
        };
        let step = json!({ "rounds": 3, "rows": [
            row("flex", 1, 8.0), row("torch fused", 1, 10.0), row("torch compile", 1, 16.0),
            row("torch fused-bf16", 1, 11.0),
            row("flex", 2, 12.0), row("torch fused", 2, 20.0), row("torch compile", 2, 10.0),
            row("torch fused-bf16", 2, 13.0),
            row("flex", 3, 9.0), row("torch fused", 3, 20.0), row("torch fused-bf16", 3, 9.0),
            json!({ "shape": "recipe", "threads": 1, "round": 3, "column": "torch compile",
                    "error": "failed" }),
        ]});
        let best = round_medians(&step, "recipe", 1, TORCH_BEST);
        assert_eq!(best, vec![(1, 10.0), (2, 10.0), (3, 9.0)]);
        assert_eq!(
            round_ratios(&step, "recipe", 1, "flex", TORCH_BEST),
            vec![0.8, 1.2, 1.0]
        );
        let (median, min, max) = spread(round_ratios(&step, "recipe", 1, "flex", TORCH_BEST));
        assert!((median - 1.0).abs() < 1e-12 && min == 0.8 && max == 1.2);
        assert_eq!(verdict(min, max), "level");
    }
}
