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
    let torch = &out["torch"];
    let has_torch = !torch.is_null();
    let mut s = format!(
        "# headlab benchmarks, {} on {}\n\n{} cores of {} ({}), RAYON_NUM_THREADS={}{}{}. Times \
         are medians of criterion's samples (min-max in brackets). Made by `cargo xtask bench{}`.\n",
        out["date"].as_str().unwrap_or("?"),
        out["host"].as_str().unwrap_or("?"),
        out["cores"],
        out["cpu"]["model"].as_str().unwrap_or("an unrecorded CPU"),
        out["cpu"]["simd"].as_str().unwrap_or("?"),
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
        if out["quick"] == true { " --quick" } else { "" },
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
    s
}

/// The matmul peaks, headlab's and PyTorch's.
fn matmul_section(out: &Value) -> String {
    let torch = &out["torch"];
    let mut s = String::new();
    let torch_peak = torch["matmul"][0]["gflops"].as_f64();
    s += "\n## Matmul peak (square f32 matmul)\n\n`burn` is the backend's `matmul`, `headlab` the kernels' `linear` (the gemm crate on the backend's buffers, what the training step's layers run). MFU below is taken against the faster of the two.\n\n| backend | kernel | n | ms | GFLOP/s |\n|---|---|---|---|---|\n";
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

/// The training step with its MFU, against PyTorch's.
fn train_step_section(out: &Value) -> String {
    let torch = &out["torch"];
    let mut s = String::new();
    s += "\n## Training step, nanoGPT CPU recipe (4L, 4H, d 128, T 64, B 12): forward, backward, clip, AdamW\n\n| backend | ms/iter | tokens/s | GFLOP/s | MFU (of matmul peak) | PyTorch ms | headlab / PyTorch |\n|---|---|---|---|---|---|---|\n";
    for r in rows(out, "train_step") {
        let t_ms = rows(torch, "train_step").next().map_or(f64::NAN, median_ms);
        s += &format!(
            "| {} | {} | {:.0} | {:.1} | {:.1}% | {} | {} |\n",
            r["backend"].as_str().unwrap_or("?"),
            ms_cell(r),
            num(&r["tokens_per_s"]),
            num(&r["achieved_gflops"]),
            100.0 * num(&r["mfu"]),
            if t_ms.is_finite() {
                format!("{t_ms:.2}")
            } else {
                "-".into()
            },
            ratio(median_ms(r), t_ms),
        );
    }
    if let Some(t) = rows(torch, "train_step").next() {
        s += &format!(
            "| PyTorch | {} | {:.0} | {:.1} | {:.1}% | | |\n",
            ms_cell(t),
            num(&t["tokens_per_s"]),
            num(&t["achieved_gflops"]),
            100.0 * num(&t["mfu"]),
        );
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
