//! nanoGPT checkpoints for `headlab import nanogpt`: the `ckpt.pt` its `train.py` writes (a
//! PyTorch zip holding a dict of `model`, `model_args`, `iter_num`, `config`, ...) and the
//! `meta.pkl` of a char-level dataset (`stoi`, `itos`).
//!
//! Both are pickles. They are read with `pytorch-reader`, which decodes pickle opcodes into
//! data and never imports or calls anything, so a file that needs code to load (a `REDUCE` of
//! `os.system`, say) comes back as an object it cannot represent, and is refused here.
//!
//! nanoGPT's model is GPT-2's with `nn.Linear` layers, stored `[out, in]`: those four weights
//! per block are transposed into GPT-2's `[in, out]`; `lm_head.weight` is the tied `wte`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use headlab_data::Tokenizer;
use headlab_model::{Gelu, GptConfig, Norm, Positional};
use pytorch_reader::{DType, PickleValue, PytorchReader};
use serde::Deserialize;
use serde_json::json;

use crate::import::{ImportError, Imported, Tensors, find_tokenizer};

const FORMAT: &str = "nanoGPT checkpoint";

/// `model_args` of a nanoGPT checkpoint: its `GPTConfig`.
#[derive(Debug, Deserialize)]
struct ModelArgs {
    n_layer: usize,
    n_head: usize,
    n_embd: usize,
    block_size: usize,
    bias: bool,
    vocab_size: usize,
    #[serde(default)]
    dropout: f64,
}

/// The prefix `torch.compile` leaves on every key of a compiled model's state dict.
const COMPILED: &str = "_orig_mod.";

/// The weights nanoGPT stores as `nn.Linear`, `[out, in]`.
const LINEARS: [&str; 4] = [
    "attn.c_attn.weight",
    "attn.c_proj.weight",
    "mlp.c_fc.weight",
    "mlp.c_proj.weight",
];

/// Reads a nanoGPT `ckpt.pt`. The vocabulary comes from `meta` (a char dataset's
/// `meta.pkl`; without one, a `meta.pkl` beside the checkpoint), or from `tokenizer` (a
/// `tokenizer.json`, or a folder with one or with `vocab.json` + `merges.txt`): GPT-2's BPE
/// for checkpoints trained on it (vocab_size 50257, or 50304 padded).
pub fn read_nanogpt(
    ckpt: &Path,
    meta: Option<&Path>,
    tokenizer: Option<&Path>,
) -> Result<Imported, ImportError> {
    let corrupt = |why: String| ImportError::Corrupt {
        path: ckpt.to_path_buf(),
        why,
    };
    if !ckpt.is_file() {
        return Err(ImportError::Missing {
            dir: ckpt.to_path_buf(),
            format: FORMAT,
            what: "the file itself".into(),
        });
    }
    let root = PytorchReader::read_pickle_data(ckpt, None)
        .map_err(|e| corrupt(format!("not a PyTorch checkpoint ({e})")))?;
    let PickleValue::Dict(root) = root else {
        return Err(corrupt(
            "it is not a dict; nanoGPT's train.py saves {'model': ..., 'model_args': ..., ...}"
                .into(),
        ));
    };
    for key in ["model", "model_args"] {
        if !root.contains_key(key) {
            return Err(ImportError::Missing {
                dir: ckpt.to_path_buf(),
                format: FORMAT,
                what: format!(
                    "the entry '{key}' (a plain state dict has no model_args to say n_head)"
                ),
            });
        }
    }
    if let Some(PickleValue::Dict(model)) = root.get("model") {
        refuse_code(ckpt, model)?;
    }
    let args: ModelArgs = PytorchReader::load_config(ckpt, Some("model_args"))
        .map_err(|e| corrupt(format!("its model_args are not nanoGPT's ({e})")))?;
    let iter_num = match root.get("iter_num") {
        Some(PickleValue::Int(n)) => Some(*n),
        _ => None,
    };
    let train_config = root.get("config").map(pickle_json);

    let tensors = state_dict(ckpt)?;

    let (tokenizer, tokenizer_path) = vocabulary(ckpt, meta, tokenizer, args.vocab_size)?;
    let tokens = tokenizer.vocab_size();
    let config = gpt_config(&args);
    // nanoGPT pads GPT-2's 50257 tokens to 50304 for speed: the rows stay, unread.
    let config = crate::import::fit_vocabulary(config, tokens).map_err(|(tokens, rows)| {
        ImportError::VocabMismatch {
            path: tokenizer_path,
            tokens,
            rows,
        }
    })?;
    let source = json!({
        "format": "nanogpt",
        "from": std::fs::canonicalize(ckpt).unwrap_or_else(|_| ckpt.to_path_buf()),
        "iter_num": iter_num,
        "model_args": {
            "n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
            "block_size": args.block_size, "bias": args.bias, "vocab_size": args.vocab_size,
            "dropout": args.dropout,
        },
        "config": train_config,
    });
    Ok(Imported {
        config,
        tokenizer,
        tensors,
        weights: ckpt.to_path_buf(),
        source,
    })
}

/// Refuses a state dict with an object in a weight's place that only running code could
/// build (a `REDUCE` of `os.system`, say): the reader kept it as a name and called nothing,
/// but left alone it would only surface later as a missing tensor.
fn refuse_code(ckpt: &Path, model: &HashMap<String, PickleValue>) -> Result<(), ImportError> {
    let mut objects: Vec<(&String, &String)> = model
        .iter()
        .filter_map(|(name, value)| match value {
            PickleValue::Unsupported(kind) if kind != TENSOR => Some((name, kind)),
            _ => None,
        })
        .collect();
    objects.sort();
    match objects.first() {
        Some((name, kind)) => Err(ImportError::RunsCode {
            path: ckpt.to_path_buf(),
            entry: format!("model['{name}']"),
            kind: kind.to_string(),
        }),
        None => Ok(()),
    }
}

/// The Python type `pytorch-reader` names a tensor by.
const TENSOR: &str = "torch.Tensor";

/// The checkpoint's `model` state dict in GPT-2's names and `[in, out]` layout, widened to
/// f32, without the causal-mask buffers and the tied head.
fn state_dict(ckpt: &Path) -> Result<Tensors, ImportError> {
    let corrupt = |why: String| ImportError::Corrupt {
        path: ckpt.to_path_buf(),
        why,
    };
    let reader = PytorchReader::with_top_level_key(ckpt, "model")
        .map_err(|e| corrupt(format!("its 'model' state dict cannot be read ({e})")))?;
    let mut tensors = BTreeMap::new();
    for (key, tensor) in reader.tensors() {
        let name = key.strip_prefix(COMPILED).unwrap_or(key);
        // The causal mask nanoGPT registers without flash attention; the tied head.
        if name.ends_with(".attn.bias") || name == "lm_head.weight" {
            continue;
        }
        let bytes = tensor
            .read()
            .map_err(|e| corrupt(format!("tensor {name} cannot be read ({e})")))?;
        let dtype = match tensor.dtype() {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            other => {
                return Err(corrupt(format!(
                    "tensor {name} is {other:?}; headlab reads float32, float16 and bfloat16"
                )));
            }
        };
        let values = crate::import::to_f32(dtype, &bytes).expect("a float type");
        let mut shape = tensor.shape().to_vec();
        let values = if LINEARS.iter().any(|l| name.ends_with(l)) && shape.len() == 2 {
            // [out, in] -> [in, out]
            let (rows, cols) = (shape[0], shape[1]);
            shape = vec![cols, rows];
            let mut t = vec![0.0; values.len()];
            for r in 0..rows {
                for c in 0..cols {
                    t[c * rows + r] = values[r * cols + c];
                }
            }
            t
        } else {
            values
        };
        tensors.insert(name.to_string(), (shape, values));
    }
    Ok(tensors)
}

/// The model config nanoGPT's `model_args` describe: GPT-2's architecture (learned
/// positions, pre-norm, exact GELU, tied embeddings).
fn gpt_config(args: &ModelArgs) -> GptConfig {
    GptConfig {
        vocab_size: args.vocab_size,
        padded_vocab_size: None,
        block_size: args.block_size,
        d_model: args.n_embd,
        n_layers: args.n_layer,
        n_heads: args.n_head,
        n_kv_heads: None,
        d_ff: None,
        dropout: args.dropout,
        bias: args.bias,
        positional: Positional::Learned,
        norm: Norm::Pre,
        tie_embeddings: true,
        attn_only: false,
        gelu: Gelu::Exact,
        ..GptConfig::default()
    }
}

/// The checkpoint's tokenizer, and the file it came from.
fn vocabulary(
    ckpt: &Path,
    meta: Option<&Path>,
    tokenizer: Option<&Path>,
    vocab_size: usize,
) -> Result<(Tokenizer, PathBuf), ImportError> {
    if let Some(path) = tokenizer {
        return match find_tokenizer(path) {
            Some(t) => Ok((t?, path.to_path_buf())),
            None => Err(ImportError::Missing {
                dir: path.to_path_buf(),
                format: "tokenizer folder",
                what: "tokenizer.json (or vocab.json + merges.txt)".into(),
            }),
        };
    }
    let beside = ckpt.with_file_name("meta.pkl");
    let meta = match meta {
        Some(meta) => meta.to_path_buf(),
        None if beside.is_file() => beside,
        None => {
            let hint = if matches!(vocab_size, 50257 | 50304) {
                "its vocab_size is GPT-2's BPE: pass --tokenizer DIR with GPT-2's tokenizer.json \
                 (or vocab.json + merges.txt), which headlab does not ship"
            } else {
                "pass --meta data/<dataset>/meta.pkl, the file nanoGPT's prepare.py wrote"
            };
            return Err(ImportError::NoVocabulary {
                ckpt: ckpt.to_path_buf(),
                beside,
                hint,
            });
        }
    };
    Ok((char_vocab(&meta)?, meta))
}

/// The char tokenizer of a `meta.pkl`: `itos`, id -> character.
fn char_vocab(meta: &Path) -> Result<Tokenizer, ImportError> {
    let corrupt = |why: String| ImportError::Corrupt {
        path: meta.to_path_buf(),
        why,
    };
    if !meta.is_file() {
        return Err(ImportError::Missing {
            dir: meta.to_path_buf(),
            format: "nanoGPT meta.pkl",
            what: "the file itself".into(),
        });
    }
    let value = PytorchReader::read_pickle_data(meta, None)
        .map_err(|e| corrupt(format!("not a pickle headlab can decode ({e})")))?;
    let dict = match value {
        PickleValue::Dict(dict) => dict,
        PickleValue::Unsupported(kind) => {
            return Err(corrupt(format!(
                "it holds a Python object ({kind}) that only running code could build; \
                 headlab reads plain data and ran nothing"
            )));
        }
        _ => return Err(corrupt("it is not a dict with itos and stoi".into())),
    };
    let itos: HashMap<String, PickleValue> = match dict.get("itos") {
        Some(PickleValue::Dict(itos)) => itos.clone(),
        Some(PickleValue::Unsupported(kind)) => {
            return Err(corrupt(format!(
                "its itos is a Python object ({kind}) that only running code could build; \
                 headlab ran nothing"
            )));
        }
        _ => {
            return Err(corrupt(
                "it has no itos dict (id -> character); is it a char dataset's meta.pkl?".into(),
            ));
        }
    };
    let mut chars = vec![None; itos.len()];
    for (id, ch) in &itos {
        let PickleValue::String(s) = ch else {
            return Err(corrupt(format!("itos[{id}] is not a string")));
        };
        let mut it = s.chars();
        let (Some(c), None) = (it.next(), it.next()) else {
            return Err(corrupt(format!("itos[{id}] = {s:?} is not one character")));
        };
        let slot = id
            .parse::<usize>()
            .ok()
            .and_then(|i| chars.get_mut(i))
            .ok_or_else(|| corrupt(format!("itos has id {id}, outside 0..{}", itos.len())))?;
        *slot = Some(c);
    }
    let chars: Vec<char> = chars
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| corrupt("itos gives two ids the same slot".into()))?;
    let vocab = headlab_data::tokenizer::CharVocab::try_from(chars).map_err(corrupt)?;
    Ok(Tokenizer::Char { vocab })
}

/// A pickled value as JSON, for the record in `import.json`.
fn pickle_json(value: &PickleValue) -> serde_json::Value {
    match value {
        PickleValue::None => serde_json::Value::Null,
        PickleValue::Bool(b) => json!(b),
        PickleValue::Int(i) => json!(i),
        PickleValue::Float(f) => json!(f),
        PickleValue::String(s) => json!(s),
        PickleValue::List(items) => items.iter().map(pickle_json).collect(),
        PickleValue::Dict(map) => map
            .iter()
            .map(|(k, v)| (k.clone(), pickle_json(v)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
        PickleValue::Bytes(b) => json!(format!("<{} bytes>", b.len())),
        PickleValue::Unsupported(kind) => json!(format!("<{kind}>")),
    }
}
