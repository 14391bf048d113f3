//! A trained model as a Hugging Face GPT-2 folder: `config.json`, `model.safetensors` and
//! `tokenizer.json`, which `transformers`' `GPT2LMHeadModel.from_pretrained(DIR)` loads.
//!
//! The layout is GPT-2's: linear weights are `Conv1D`, stored `[in, out]`, which is also how
//! Burn's `Linear` stores them, so nothing is transposed; q, k and v are fused into one
//! `c_attn` of `[d_model, 3 d_model]`, q's columns first; a bias-free model gets zero biases;
//! a tied head is left out of the file (GPT-2 ties it to `wte`), an untied one is written as
//! `lm_head.weight`, `[vocab, d_model]` like PyTorch's `nn.Linear`.
//!
//! [`read_gpt2_folder`] reads such a folder back, from headlab or from elsewhere (gpt2,
//! distilgpt2, TinyStories), for `headlab import hf`.

use headlab_kernels::to_host;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use burn::tensor::Tensor;
use headlab_data::Tokenizer;
use headlab_model::config::Activation;
use headlab_model::{Gelu, Gpt, GptConfig, Norm, Positional};
use serde_json::{Value, json};
use thiserror::Error;

use crate::import::{ImportError, Imported};

/// An export that cannot be made. Nothing is written when one is returned.
#[derive(Debug, Error)]
pub enum HfError {
    /// GPT-2 has no way to say what the config says.
    #[error(
        "GPT-2 cannot express [model] {key} = {value}: {why}. Export a model trained with \
         {key} = {gpt2}"
    )]
    Unsupported {
        /// The `[model]` key.
        key: &'static str,
        /// Its value in this run.
        value: String,
        /// What GPT-2 has instead.
        why: &'static str,
        /// The value GPT-2 can express.
        gpt2: &'static str,
    },
    /// The output folder is in the way.
    #[error(
        "{path} exists and is not empty: pass a new folder to --out, or --force to replace a \
         previous export there (nothing was written)"
    )]
    OutExists {
        /// The folder.
        path: PathBuf,
    },
    /// `--force` on a folder that holds more than an export.
    #[error(
        "{path} holds {entry}, which an export does not write: --force replaces only a previous \
         export's folder, so pass a new folder to --out (nothing was written)"
    )]
    NotAnExport {
        /// The folder.
        path: PathBuf,
        /// The first file or folder in it that an export does not write.
        entry: String,
    },
    /// Writing failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The safetensors encoder refused the tensors.
    #[error("cannot encode the weights as safetensors: {0}")]
    Encode(String),
}

/// GPT-2's `config.json` for `config`, or the first key GPT-2 cannot express.
pub fn gpt2_config(config: &GptConfig) -> Result<Value, HfError> {
    let unsupported = |key, value: String, why, gpt2| {
        Err(HfError::Unsupported {
            key,
            value,
            why,
            gpt2,
        })
    };
    if config.positional != Positional::Learned {
        return unsupported(
            "positional",
            format!("{:?}", config.positional).to_lowercase(),
            "it learns one embedding per position",
            "\"learned\"",
        );
    }
    if config.norm != Norm::Pre {
        return unsupported(
            "norm",
            "\"post\"".into(),
            "its LayerNorms come before each sublayer",
            "\"pre\"",
        );
    }
    if config.kv_heads() != config.n_heads {
        return unsupported(
            "n_kv_heads",
            config.kv_heads().to_string(),
            "every query head has its own keys and values",
            "n_heads (or unset)",
        );
    }
    if config.attn_only {
        return unsupported(
            "attn_only",
            "true".into(),
            "every block has an MLP",
            "false",
        );
    }
    if config.activation != Activation::Gelu {
        return unsupported(
            "activation",
            "\"relu2\"".into(),
            "its MLP runs a GELU",
            "\"gelu\"",
        );
    }
    let speedrun_switches = [
        (
            "qk_norm",
            config.qk_norm,
            "its queries and keys are not normalised",
        ),
        ("bigram", config.bigram, "it has no previous-token table"),
    ];
    for (key, on, why) in speedrun_switches {
        if on {
            return unsupported(key, "true".into(), why, "false");
        }
    }
    if let Some(c) = config.logit_softcap {
        return unsupported(
            "logit_softcap",
            c.to_string(),
            "its logits are not capped",
            "none (remove it)",
        );
    }
    Ok(json!({
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        // A padded vocabulary's rows all go out, so the weights round-trip.
        "vocab_size": config.embedding_rows(),
        "n_positions": config.block_size,
        "n_embd": config.d_model,
        "n_layer": config.n_layers,
        "n_head": config.n_heads,
        "n_inner": config.mlp_width(),
        "activation_function": match config.gelu {
            Gelu::Exact => "gelu",
            Gelu::Tanh => "gelu_new",
        },
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "initializer_range": 0.02,
        "scale_attn_weights": true,
        "tie_word_embeddings": config.tie_embeddings,
        "bos_token_id": null,
        "eos_token_id": null,
        "headlab": { "bias": config.bias },
    }))
}

/// Every tensor of the GPT-2 state dict, named as `GPT2LMHeadModel` names them, with its
/// shape and row-major values.
// Over 80 lines on purpose: the whole GPT-2 state dict, one tensor after another in transformers' order.
pub fn gpt2_tensors(model: &Gpt) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let c = &model.config;
    let d = c.d_model;
    let mut out = Vec::new();
    let mut push = |name: String, shape: Vec<usize>, v: Vec<f32>| {
        debug_assert_eq!(shape.iter().product::<usize>(), v.len(), "{name}");
        out.push((name, shape, v));
    };
    // A missing bias or LayerNorm shift is zero.
    let bias = |b: &Option<burn::module::Param<Tensor<1>>>, n: usize| {
        b.as_ref()
            .map_or_else(|| vec![0.0; n], |b| to_host::<f32, _>(b.val()))
    };
    let ln = |push: &mut dyn FnMut(String, Vec<usize>, Vec<f32>),
              name: &str,
              l: &burn::nn::LayerNorm| {
        push(
            format!("{name}.weight"),
            vec![d],
            to_host::<f32, _>(l.gamma.val()),
        );
        push(format!("{name}.bias"), vec![d], bias(&l.beta, d));
    };
    push(
        "transformer.wte.weight".into(),
        vec![c.embedding_rows(), d],
        to_host::<f32, _>(model.wte.weight.val()),
    );
    if let Some(wpe) = &model.wpe {
        push(
            "transformer.wpe.weight".into(),
            vec![c.block_size, d],
            to_host::<f32, _>(wpe.weight.val()),
        );
    }
    for (i, block) in model.blocks.iter().enumerate() {
        let p = format!("transformer.h.{i}");
        ln(&mut push, &format!("{p}.ln_1"), &block.ln_1);
        let attn = &block.attn;
        // [d, d] x 3 -> [d, 3d]: row r of c_attn is row r of q, then of k, then of v.
        let (q, k, v) = (
            to_host::<f32, _>(attn.q_proj.weight.val()),
            to_host::<f32, _>(attn.k_proj.weight.val()),
            to_host::<f32, _>(attn.v_proj.weight.val()),
        );
        let mut fused = Vec::with_capacity(3 * d * d);
        for r in 0..d {
            for w in [&q, &k, &v] {
                fused.extend_from_slice(&w[r * d..(r + 1) * d]);
            }
        }
        push(format!("{p}.attn.c_attn.weight"), vec![d, 3 * d], fused);
        let mut fused_bias = bias(&attn.q_proj.bias, d);
        fused_bias.extend(bias(&attn.k_proj.bias, d));
        fused_bias.extend(bias(&attn.v_proj.bias, d));
        push(format!("{p}.attn.c_attn.bias"), vec![3 * d], fused_bias);
        push(
            format!("{p}.attn.c_proj.weight"),
            vec![d, d],
            to_host::<f32, _>(attn.o_proj.weight.val()),
        );
        push(
            format!("{p}.attn.c_proj.bias"),
            vec![d],
            bias(&attn.o_proj.bias, d),
        );
        if let Some(ln_2) = &block.ln_2 {
            ln(&mut push, &format!("{p}.ln_2"), ln_2);
        }
        if let Some(mlp) = &block.mlp {
            let ff = c.mlp_width();
            push(
                format!("{p}.mlp.c_fc.weight"),
                vec![d, ff],
                to_host::<f32, _>(mlp.c_fc.weight.val()),
            );
            push(
                format!("{p}.mlp.c_fc.bias"),
                vec![ff],
                bias(&mlp.c_fc.bias, ff),
            );
            push(
                format!("{p}.mlp.c_proj.weight"),
                vec![ff, d],
                to_host::<f32, _>(mlp.c_proj.weight.val()),
            );
            push(
                format!("{p}.mlp.c_proj.bias"),
                vec![d],
                bias(&mlp.c_proj.bias, d),
            );
        }
    }
    if let Some(ln_f) = &model.ln_f {
        ln(&mut push, "transformer.ln_f", ln_f);
    }
    if let Some(head) = &model.lm_head {
        // Burn's [d, vocab] -> nn.Linear's [vocab, d].
        push(
            "lm_head.weight".into(),
            vec![c.embedding_rows(), d],
            to_host::<f32, _>(head.weight.val().transpose()),
        );
    }
    out
}

/// `tokenizer_config.json`: without it `AutoTokenizer` picks GPT-2's own tokenizer class from
/// `model_type` and, for headlab's char and byte vocabularies, encodes spaces away. It names
/// the class that reads `tokenizer.json` as it is, and turns off the clean-up that would join
/// " ." into "." on decoding.
fn tokenizer_config(config: &GptConfig) -> Value {
    json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": config.block_size,
        "clean_up_tokenization_spaces": false,
        "added_tokens_decoder": {},
    })
}

/// Writes `model` and `tokenizer` as a GPT-2 folder at `out`, which must be new or empty.
/// Everything is encoded before the first file is written; the files go to a sibling
/// folder that is renamed into place, so a failed export leaves nothing behind.
pub fn export_gpt2(
    model: &Gpt,
    tokenizer: &Tokenizer,
    out: &Path,
    force: bool,
) -> Result<(), HfError> {
    let config = gpt2_config(&model.config)?;
    check_out(out, force)?;
    let tensors = gpt2_tensors(model);
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let views = tensors
        .iter()
        .zip(&bytes)
        .map(|((name, shape, _), b)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), b)
                .map(|view| (name.clone(), view))
                .map_err(|e| HfError::Encode(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let weights = safetensors::serialize(views, Some(metadata))
        .map_err(|e| HfError::Encode(e.to_string()))?;
    let files = [
        (
            "config.json",
            serde_json::to_vec_pretty(&config).expect("JSON"),
        ),
        ("model.safetensors", weights),
        (
            "tokenizer.json",
            tokenizer.to_huggingface_json().into_bytes(),
        ),
        (
            "tokenizer_config.json",
            serde_json::to_vec_pretty(&tokenizer_config(&model.config)).expect("JSON"),
        ),
    ];
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| HfError::Io { path, source }
    };
    let name = out
        .file_name()
        .map_or("export".into(), |n| n.to_string_lossy().into_owned());
    let staging = out.with_file_name(format!(".{name}.partial-{}", std::process::id()));
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    let written = files.iter().try_for_each(|(file, data)| {
        let path = staging.join(file);
        std::fs::write(&path, data).map_err(io(&path))
    });
    let moved = written.and_then(|()| {
        // Empty, or (with --force, checked above) holding only a previous export's files.
        if out.exists() {
            std::fs::remove_dir_all(out).map_err(io(out))?;
        }
        std::fs::rename(&staging, out).map_err(io(out))
    });
    if moved.is_err() {
        std::fs::remove_dir_all(&staging).ok();
    }
    moved
}

/// The files [`export_gpt2`] writes: all that `--force` may replace.
const EXPORT_FILES: [&str; 4] = [
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
];

/// Whether an export may go to `out`: new, empty, or with `force` a previous export's folder
/// (nothing but [`EXPORT_FILES`] in it, so replacing it loses nothing else).
fn check_out(out: &Path, force: bool) -> Result<(), HfError> {
    let Ok(entries) = std::fs::read_dir(out) else {
        // Not a folder: free when nothing is there, in the way when a file is.
        if out.exists() {
            return Err(HfError::OutExists {
                path: out.to_path_buf(),
            });
        }
        return Ok(());
    };
    let names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    if !force {
        return Err(HfError::OutExists {
            path: out.to_path_buf(),
        });
    }
    let mut foreign: Vec<&String> = names
        .iter()
        .filter(|n| !EXPORT_FILES.contains(&n.as_str()))
        .collect();
    foreign.sort();
    match foreign.first() {
        Some(name) => Err(HfError::NotAnExport {
            path: out.to_path_buf(),
            entry: name.to_string(),
        }),
        None => Ok(()),
    }
}

/// The Hugging Face files a GPT-2 folder is read from.
const HF_FORMAT: &str = "Hugging Face GPT-2 folder";

/// Reads a Hugging Face GPT-2-family folder: `config.json` (model_type `gpt2`),
/// `model.safetensors` (or shards listed in `model.safetensors.index.json`) and
/// `tokenizer.json` or `vocab.json` + `merges.txt`. Tensor names may carry `transformer.`
/// (`GPT2LMHeadModel`) or not (`GPT2Model`); the attention-mask buffers some files hold are
/// skipped; `lm_head.weight` is read only when the head is untied.
// Over 80 lines on purpose: one folder read in order (config.json, weights, tokenizer), each part with its own error.
pub fn read_gpt2_folder(dir: &Path) -> Result<Imported, ImportError> {
    let missing = |what: String| ImportError::Missing {
        dir: dir.to_path_buf(),
        format: HF_FORMAT,
        what,
    };
    if !dir.is_dir() {
        return Err(missing("the folder itself".into()));
    }
    let config_path = dir.join("config.json");
    // A run directory already is what an import would make: say so, not what it lacks.
    if !config_path.is_file() && dir.join("config.toml").is_file() {
        return Err(ImportError::HeadlabRun {
            dir: dir.to_path_buf(),
        });
    }
    if !config_path.is_file() {
        return Err(missing(
            "config.json (the model's shape; download it with the weights)".into(),
        ));
    }
    let corrupt = |path: &Path, why: String| ImportError::Corrupt {
        path: path.to_path_buf(),
        why,
    };
    let text =
        std::fs::read_to_string(&config_path).map_err(|e| corrupt(&config_path, e.to_string()))?;
    let hf: Value = serde_json::from_str(&text)
        .map_err(|e| corrupt(&config_path, format!("not JSON ({e})")))?;
    let mut config = config_from_gpt2(&hf, &config_path)?;

    // The weights: one file, or the shards an index lists.
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    let files: Vec<PathBuf> = if single.is_file() {
        vec![single]
    } else if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| corrupt(&index, e.to_string()))?;
        let map: Value =
            serde_json::from_str(&text).map_err(|e| corrupt(&index, format!("not JSON ({e})")))?;
        let mut shards: Vec<PathBuf> = map["weight_map"]
            .as_object()
            .ok_or_else(|| corrupt(&index, "it has no weight_map".into()))?
            .values()
            .filter_map(|f| f.as_str().map(|f| dir.join(f)))
            .collect();
        shards.sort();
        shards.dedup();
        shards
    } else if dir.join("pytorch_model.bin").is_file() {
        return Err(ImportError::Pickle {
            path: dir.join("pytorch_model.bin"),
        });
    } else {
        return Err(missing("model.safetensors (the weights)".into()));
    };
    let mut tensors = BTreeMap::new();
    for file in &files {
        let bytes = std::fs::read(file).map_err(|e| corrupt(file, e.to_string()))?;
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| {
            corrupt(
                file,
                format!("not a safetensors file ({e}); download it again"),
            )
        })?;
        for (name, view) in st.tensors() {
            let short = name.strip_prefix("transformer.").unwrap_or(&name);
            // Causal-mask buffers of older GPT-2 files: headlab builds its own mask.
            if short.ends_with(".attn.bias") || short.ends_with(".attn.masked_bias") {
                continue;
            }
            if name == "lm_head.weight" && config.tie_embeddings {
                continue;
            }
            let dtype = format!("{:?}", view.dtype());
            let values = crate::import::to_f32(&dtype, view.data()).ok_or_else(|| {
                corrupt(
                    file,
                    format!("tensor {name} is {dtype}; headlab reads F32, BF16 and F16"),
                )
            })?;
            let full = if name == "lm_head.weight" {
                name.clone()
            } else {
                format!("transformer.{short}")
            };
            tensors.insert(full, (view.shape().to_vec(), values));
        }
    }
    let weights = files[0].clone();

    let tokenizer = match crate::import::find_tokenizer(dir) {
        Some(t) => t?,
        None => {
            return Err(missing(
                "tokenizer.json (or vocab.json + merges.txt), the vocabulary the model reads"
                    .into(),
            ));
        }
    };
    let rows = config.vocab_size;
    config = crate::import::fit_vocabulary(config, tokenizer.vocab_size()).map_err(
        |(tokens, rows)| ImportError::VocabMismatch {
            path: dir.join("tokenizer.json"),
            tokens,
            rows,
        },
    )?;
    debug_assert_eq!(config.embedding_rows(), rows);
    let source = json!({
        "format": "hf",
        "from": std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()),
        "config": hf,
    });
    Ok(Imported {
        config,
        tokenizer,
        tensors,
        weights,
        source,
    })
}

/// headlab's `[model]` for a GPT-2 `config.json`, or the first key it cannot take.
fn config_from_gpt2(hf: &Value, path: &Path) -> Result<GptConfig, ImportError> {
    let unsupported = |key: &str, value: &Value, why: &str| ImportError::Unsupported {
        path: path.to_path_buf(),
        key: key.into(),
        value: value.to_string(),
        why: why.into(),
    };
    let model_type = &hf["model_type"];
    if model_type.as_str() != Some("gpt2") {
        return Err(unsupported(
            "model_type",
            model_type,
            "headlab imports GPT-2-family models (model_type \"gpt2\": gpt2, distilgpt2, \
             TinyStories, nanoGPT exports)",
        ));
    }
    let size = |keys: &[&str]| -> Result<usize, ImportError> {
        keys.iter()
            .find_map(|k| hf[k].as_u64())
            .map(|n| n as usize)
            .ok_or_else(|| ImportError::Missing {
                dir: path.to_path_buf(),
                format: "GPT-2 config.json",
                what: format!("the integer {}", keys[0]),
            })
    };
    let gelu = match hf["activation_function"].as_str().unwrap_or("gelu_new") {
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Gelu::Tanh,
        "gelu" => Gelu::Exact,
        _ => {
            return Err(unsupported(
                "activation_function",
                &hf["activation_function"],
                "headlab's MLP has \"gelu\" (exact) and \"gelu_new\" (tanh)",
            ));
        }
    };
    let eps = hf["layer_norm_epsilon"].as_f64().unwrap_or(1e-5);
    if (eps - 1e-5).abs() > 1e-12 {
        return Err(unsupported(
            "layer_norm_epsilon",
            &hf["layer_norm_epsilon"],
            "headlab's LayerNorm has eps 1e-5, as GPT-2",
        ));
    }
    for (key, want) in [
        ("scale_attn_weights", true),
        ("scale_attn_by_inverse_layer_idx", false),
        ("add_cross_attention", false),
    ] {
        if hf[key].as_bool().is_some_and(|b| b != want) {
            return Err(unsupported(
                key,
                &hf[key],
                "headlab's attention scales scores by 1/sqrt(d_k) only, without cross-attention",
            ));
        }
    }
    let d_model = size(&["n_embd", "hidden_size"])?;
    let n_inner = hf["n_inner"].as_u64().map(|n| n as usize);
    Ok(GptConfig {
        vocab_size: size(&["vocab_size"])?,
        padded_vocab_size: None,
        block_size: size(&["n_positions", "n_ctx"])?,
        d_model,
        n_layers: size(&["n_layer", "num_hidden_layers"])?,
        n_heads: size(&["n_head", "num_attention_heads"])?,
        n_kv_heads: None,
        d_ff: n_inner.filter(|&n| n != 4 * d_model),
        dropout: hf["resid_pdrop"].as_f64().unwrap_or(0.0),
        // Biases unless the folder is a bias-free headlab export.
        bias: hf["headlab"]["bias"].as_bool().unwrap_or(true),
        positional: Positional::Learned,
        norm: Norm::Pre,
        tie_embeddings: hf["tie_word_embeddings"].as_bool().unwrap_or(true),
        attn_only: false,
        gelu,
        ..GptConfig::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::{Module, ModuleMapper, Param};
    use burn::tensor::{Device, Distribution, Int, TensorData};
    use safetensors::SafeTensors;

    /// Every weight scaled up and shifted by noise, so that biases, LayerNorm shifts and
    /// the order of q, k and v all change the logits.
    struct Perturb;
    impl ModuleMapper for Perturb {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            param.map(|t| {
                let noise = Tensor::random(t.shape(), Distribution::Normal(0.0, 0.2), &t.device());
                t * 10.0 + noise
            })
        }
    }

    /// headlab's char, byte and BPE exports as transformers, TransformerLens and a pipeline
    /// load them (tools/check-export.py recorded every route in routes.json): the prompt's ids
    /// and the greedy continuation are headlab's, and exporting the same weights again writes
    /// the same files, tokenizer_config.json among them. Without that file AutoTokenizer fell
    /// back to GPT-2's tokenizer class, which drops the char vocabulary's spaces (recorded
    /// too).
    #[test]
    fn exports_load_by_every_route_as_headlab_reads_them() {
        let fixtures =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/exports");
        let routes: Value =
            serde_json::from_slice(&std::fs::read(fixtures.join("routes.json")).unwrap()).unwrap();
        let prompt = routes["prompt"].as_str().unwrap();
        let n = routes["tokens"].as_u64().unwrap() as usize;
        let ids = |v: &Value| -> Vec<u32> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap() as u32)
                .collect()
        };
        let device = Device::flex();
        for kind in ["char", "byte", "bpe"] {
            let dir = fixtures.join(kind);
            let record = &routes["exports"][kind];
            let imported = read_gpt2_folder(&dir).unwrap();
            let model = imported.build(&device).unwrap();
            let prompt_ids = imported.tokenizer.encode(prompt).unwrap();
            let greedy = model
                .generate(
                    &prompt_ids,
                    n,
                    &headlab_model::Sampling {
                        temperature: 0.0,
                        ..Default::default()
                    },
                    |_| {},
                )
                .unwrap();
            for route in ["tokenizer_file", "auto", "pipeline", "transformer_lens"] {
                let r = &record[route];
                assert!(!r.is_null(), "{kind}: no {route} in routes.json");
                if !r["ids"].is_null() {
                    assert_eq!(ids(&r["ids"]), prompt_ids, "{kind} {route}");
                    assert_eq!(ids(&r["greedy_ids"]), greedy, "{kind} {route}");
                }
                assert_eq!(
                    r["greedy_text"].as_str().unwrap(),
                    imported.tokenizer.decode(&greedy),
                    "{kind} {route}"
                );
            }
            let out = tempfile::tempdir().unwrap();
            export_gpt2(
                &model,
                &imported.tokenizer,
                &out.path().join("again"),
                false,
            )
            .unwrap();
            for file in [
                "config.json",
                "tokenizer.json",
                "tokenizer_config.json",
                "model.safetensors",
            ] {
                let written = std::fs::read(out.path().join("again").join(file));
                assert_eq!(
                    written.ok(),
                    std::fs::read(dir.join(file)).ok(),
                    "{kind}: {file} differs from the export transformers loaded"
                );
            }
        }
        // The char export without tokenizer_config.json: GPT-2's class lost the spaces.
        let bare = &routes["exports"]["char"]["auto_without_tokenizer_config"];
        assert_eq!(bare["class"], "GPT2Tokenizer");
        assert_ne!(bare["ids"], routes["exports"]["char"]["auto"]["ids"]);
    }

    /// A word-tokenizer export as AutoTokenizer reads it (tools/word-ids.py recorded
    /// word-ids.json): the same ids for words at a line's start and after a space, "." and
    /// newlines, id 0 for an unknown word, and the texts back on decoding; exporting again
    /// writes the same tokenizer files.
    #[test]
    fn word_exports_give_autotokenizers_ids() {
        let fixtures =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/exports");
        let record: Value =
            serde_json::from_slice(&std::fs::read(fixtures.join("word-ids.json")).unwrap())
                .unwrap();
        // transformers 5's fast class, reading tokenizer.json as it is (not GPT-2's own).
        assert_eq!(record["class"], "TokenizersBackend");
        let dir = fixtures.join("word");
        let imported = read_gpt2_folder(&dir).unwrap();
        let tokenizer = &imported.tokenizer;
        assert_eq!(tokenizer.kind(), headlab_data::TokenizerKind::Word);
        let texts = record["texts"].as_array().unwrap();
        assert_eq!(texts.len(), 4);
        for (i, t) in texts.iter().enumerate() {
            let text = t["text"].as_str().unwrap();
            let theirs: Vec<u32> = t["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap() as u32)
                .collect();
            if i + 1 < texts.len() {
                assert_eq!(tokenizer.encode(text).unwrap(), theirs, "{text:?}");
                assert_eq!(tokenizer.decode(&theirs), text);
            } else {
                // A prompt's unknown word is an error; data's is the unknown id, as theirs.
                let err = tokenizer.encode(text).unwrap_err().to_string();
                assert!(err.contains("\" zebra\""), "{err}");
                let mut ids = headlab_data::TokenIds::for_vocab(tokenizer.vocab_size(), 8);
                tokenizer.encode_into(text, &mut ids, &mut |_| {}).unwrap();
                assert_eq!(ids.to_vec(0..ids.len()), theirs);
            }
        }
        let model = imported.build(&Device::flex()).unwrap();
        let out = tempfile::tempdir().unwrap();
        export_gpt2(&model, tokenizer, &out.path().join("again"), false).unwrap();
        for file in ["tokenizer.json", "tokenizer_config.json", "config.json"] {
            assert_eq!(
                std::fs::read(out.path().join("again").join(file)).ok(),
                std::fs::read(dir.join(file)).ok(),
                "{file} differs from the export transformers loaded"
            );
        }
    }

    /// GPT-2's forward pass in f64, written from its definition and reading the exported
    /// file by GPT-2's tensor names in Conv1D's `[in, out]` layout: it shares no code with
    /// the model or the export.
    fn gpt2_logits_f64(file: &[u8], config: &Value, ids: &[usize]) -> Vec<Vec<f64>> {
        let st = SafeTensors::deserialize(file).unwrap();
        let get = |name: &str| -> Vec<f64> {
            let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            t.data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
                .collect()
        };
        let n = |k: &str| config[k].as_u64().unwrap() as usize;
        let (d, h, layers, vocab) = (n("n_embd"), n("n_head"), n("n_layer"), n("vocab_size"));
        let (ff, dk) = (n("n_inner"), d / h);
        // x [in] @ w [in, out] + b [out]
        let affine = |x: &[f64], w: &[f64], b: &[f64]| -> Vec<f64> {
            (0..b.len())
                .map(|o| {
                    b[o] + x
                        .iter()
                        .enumerate()
                        .map(|(i, xi)| xi * w[i * b.len() + o])
                        .sum::<f64>()
                })
                .collect()
        };
        let layer_norm = |x: &[f64], g: &[f64], b: &[f64]| -> Vec<f64> {
            let mean = x.iter().sum::<f64>() / x.len() as f64;
            let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / x.len() as f64;
            x.iter()
                .enumerate()
                .map(|(i, v)| (v - mean) / (var + 1e-5).sqrt() * g[i] + b[i])
                .collect()
        };
        let gelu_new = |x: f64| {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        };
        let (wte, wpe) = (get("transformer.wte.weight"), get("transformer.wpe.weight"));
        let mut xs: Vec<Vec<f64>> = ids
            .iter()
            .enumerate()
            .map(|(p, &id)| (0..d).map(|j| wte[id * d + j] + wpe[p * d + j]).collect())
            .collect();
        for l in 0..layers {
            let w = |s: &str| get(&format!("transformer.h.{l}.{s}"));
            let qkv: Vec<Vec<f64>> = xs
                .iter()
                .map(|x| {
                    affine(
                        &layer_norm(x, &w("ln_1.weight"), &w("ln_1.bias")),
                        &w("attn.c_attn.weight"),
                        &w("attn.c_attn.bias"),
                    )
                })
                .collect();
            let mut attended = vec![vec![0.0; d]; xs.len()];
            for head in 0..h {
                for (t, out) in attended.iter_mut().enumerate() {
                    let q = &qkv[t][head * dk..(head + 1) * dk];
                    let scores: Vec<f64> = (0..=t)
                        .map(|s| {
                            let k = &qkv[s][d + head * dk..d + (head + 1) * dk];
                            q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (dk as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                    let z: f64 = scores.iter().map(|s| (s - max).exp()).sum();
                    for (s, score) in scores.iter().enumerate() {
                        let p = (score - max).exp() / z;
                        for j in 0..dk {
                            out[head * dk + j] += p * qkv[s][2 * d + head * dk + j];
                        }
                    }
                }
            }
            for (x, a) in xs.iter_mut().zip(&attended) {
                let o = affine(a, &w("attn.c_proj.weight"), &w("attn.c_proj.bias"));
                x.iter_mut().zip(o).for_each(|(xi, oi)| *xi += oi);
                let hidden = affine(
                    &layer_norm(x, &w("ln_2.weight"), &w("ln_2.bias")),
                    &w("mlp.c_fc.weight"),
                    &w("mlp.c_fc.bias"),
                );
                assert_eq!(hidden.len(), ff);
                let hidden: Vec<f64> = hidden.into_iter().map(gelu_new).collect();
                let m = affine(&hidden, &w("mlp.c_proj.weight"), &w("mlp.c_proj.bias"));
                x.iter_mut().zip(m).for_each(|(xi, mi)| *xi += mi);
            }
        }
        let head = if config["tie_word_embeddings"] == true {
            wte
        } else {
            get("lm_head.weight")
        };
        xs.iter()
            .map(|x| {
                let x = layer_norm(
                    x,
                    &get("transformer.ln_f.weight"),
                    &get("transformer.ln_f.bias"),
                );
                (0..vocab)
                    .map(|v| (0..d).map(|j| x[j] * head[v * d + j]).sum())
                    .collect()
            })
            .collect()
    }

    fn model(bias: bool, tie: bool, device: &Device) -> Gpt {
        let config = GptConfig::new(11)
            .with_block_size(8)
            .with_d_model(12)
            .with_n_layers(2)
            .with_n_heads(3)
            .with_d_ff(Some(20))
            .with_bias(bias)
            .with_tie_embeddings(tie)
            .with_gelu(Gelu::Tanh);
        device.seed(5);
        Gpt::new(&config, device).unwrap().map(&mut Perturb)
    }

    #[test]
    fn exported_weights_give_gpt2s_logits_computed_from_its_definition() {
        let device = Device::flex();
        let tokenizer = Tokenizer::byte();
        let ids = [3usize, 1, 4, 1, 5, 9, 2, 6];
        for (bias, tie) in [(true, true), (false, true), (true, false)] {
            let model = model(bias, tie, &device);
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("gpt2");
            export_gpt2(&model, &tokenizer, &out, false).unwrap();
            let config: Value =
                serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
            assert_eq!(config["activation_function"], "gelu_new");
            let file = std::fs::read(out.join("model.safetensors")).unwrap();
            let expected = gpt2_logits_f64(&file, &config, &ids);
            let input: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
            let input =
                Tensor::<2, Int>::from_data(TensorData::new(input, [1, ids.len()]), &device);
            let got = to_host::<f32, _>(model.forward(input));
            let vocab = 11;
            let mut worst = 0f64;
            for (t, row) in expected.iter().enumerate() {
                for (v, e) in row.iter().enumerate() {
                    let g = got[t * vocab + v] as f64;
                    worst = worst.max((g - e).abs() / (1.0 + e.abs()));
                }
            }
            assert!(
                worst < 1e-4,
                "bias {bias}, tied {tie}: worst relative error {worst}"
            );
            let tensors = SafeTensors::deserialize(&file).unwrap();
            let names: Vec<String> = tensors.names().into_iter().map(String::from).collect();
            assert_eq!(names.contains(&"lm_head.weight".to_string()), !tie);
        }
    }

    #[test]
    fn what_gpt2_cannot_express_is_named_and_nothing_is_written() {
        let device = Device::flex();
        let base = GptConfig::new(11)
            .with_block_size(8)
            .with_d_model(12)
            .with_n_heads(3);
        let cases = [
            (base.clone().with_positional(Positional::Rope), "positional"),
            (
                base.clone().with_positional(Positional::Sinusoidal),
                "positional",
            ),
            (base.clone().with_norm(Norm::Post), "norm"),
            (base.clone().with_n_kv_heads(Some(1)), "n_kv_heads"),
            (base.clone().with_attn_only(true), "attn_only"),
            (
                base.clone().with_activation(Activation::Relu2),
                "activation",
            ),
            (base.clone().with_qk_norm(true), "qk_norm"),
            (base.clone().with_bigram(true), "bigram"),
            (base.clone().with_logit_softcap(Some(30.0)), "logit_softcap"),
        ];
        for (config, key) in cases {
            let model = Gpt::new(&config, &device).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("gpt2");
            let err = export_gpt2(&model, &Tokenizer::byte(), &out, false).unwrap_err();
            assert!(
                err.to_string().contains(&format!("[model] {key} =")),
                "{err}"
            );
            assert!(!out.exists());
            assert_eq!(
                std::fs::read_dir(dir.path()).unwrap().count(),
                0,
                "{key}: left files"
            );
        }
        // An occupied folder is refused, and kept as it was.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mine.txt"), "keep").unwrap();
        let model = Gpt::new(&base, &device).unwrap();
        let err = export_gpt2(&model, &Tokenizer::byte(), dir.path(), false).unwrap_err();
        assert!(matches!(err, HfError::OutExists { .. }), "{err}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
