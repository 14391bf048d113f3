//! Models trained elsewhere as headlab runs. A Hugging Face GPT-2 folder ([`crate::hf`]) and a
//! nanoGPT checkpoint ([`crate::nanogpt`]) are both read into GPT-2's tensor names and
//! `Conv1D` layout (`[in, out]`, which is also Burn's `Linear`), checked against the model
//! config they came with, and written as a run directory whose `best` and `last` checkpoints
//! hold the weights at step 0. `sample`, `eval --file`, `heads --text` and `train --resume
//! RUN --set data.path=FILE` (fine-tuning) then work as on a run trained here.
//!
//! Nothing here runs code from the files: safetensors is plain bytes, and PyTorch's pickles
//! go through a reader that only decodes data.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::module::Param;
use burn::nn::{LayerNorm, Linear};
use burn::tensor::{Device, Tensor, TensorData};
use headlab_data::{DataConfig, Tokenizer, TokenizerError, TokenizerKind};
use headlab_model::{Block, Gpt, GptConfig, GptConfigError};
use thiserror::Error;

use headlab_train::config::{ConfigError, RunConfig};
use headlab_train::optim::Optimizer;
use headlab_train::run::{IMPORT_FILE, RunDir, RunError, TrainState, TrainedOn, write_atomic};
use headlab_train::step::optimizer_config;

/// `config` (whose `vocab_size` is the weights' embedding rows) for a tokenizer of `tokens`:
/// the same, or, when the embedding has more rows than the tokenizer has tokens (nanoGPT pads
/// 50257 to 50304), the tokenizer's vocabulary with the rows kept as `padded_vocab_size`, and a
/// note naming both sizes. `Err((tokens, rows))` when the tokenizer has more tokens than rows.
pub(crate) fn fit_vocabulary(
    mut config: GptConfig,
    tokens: usize,
) -> Result<GptConfig, (usize, usize)> {
    let rows = config.vocab_size;
    if tokens > rows {
        return Err((tokens, rows));
    }
    if tokens < rows {
        eprintln!(
            "warning: the model's embedding has {rows} rows but its tokenizer {tokens} tokens; \
             the {} rows past the tokenizer are kept (an export writes all {rows} back), and \
             generation never picks one",
            rows - tokens
        );
        config.padded_vocab_size = Some(rows);
    }
    config.vocab_size = tokens;
    Ok(config)
}

/// A model that cannot be imported. Nothing is written when one is returned.
#[derive(Debug, Error)]
pub enum ImportError {
    /// A file the format needs is not there.
    #[error("{} is not a {format}: {what} is missing", dir.display())]
    Missing {
        /// The folder or file given.
        dir: PathBuf,
        /// What it should be (`Hugging Face GPT-2 folder`, ...).
        format: &'static str,
        /// The missing file or entry, and what to do.
        what: String,
    },
    /// A checkpoint whose vocabulary is elsewhere: nanoGPT keeps a char dataset's in the
    /// dataset's `meta.pkl`, and a BPE model's is GPT-2's.
    #[error(
        "{} holds no vocabulary and there is no meta.pkl beside it ({}): {hint}",
        ckpt.display(),
        beside.display()
    )]
    NoVocabulary {
        /// The checkpoint.
        ckpt: PathBuf,
        /// Where a `meta.pkl` was looked for.
        beside: PathBuf,
        /// Which option gives it.
        hint: &'static str,
    },
    /// A headlab run given where a Hugging Face folder belongs.
    #[error(
        "{} is a headlab run (config.toml), not a Hugging Face folder: every command takes it \
         as it is (`headlab sample {}`), and `headlab export hf {} --out DIR` writes it as one",
        dir.display(),
        dir.display(),
        dir.display()
    )]
    HeadlabRun {
        /// The run directory.
        dir: PathBuf,
    },
    /// A pickle holding, where data belongs, an object that only running code could build.
    #[error(
        "{} is refused: its {entry} is a Python object ({kind}) that only running code could \
         build, where a tensor belongs; Python's pickle would call it on loading. headlab \
         reads plain data and ran nothing: use a checkpoint from a source you trust",
        path.display()
    )]
    RunsCode {
        /// The file.
        path: PathBuf,
        /// Where in it (`model['transformer.wte.weight']`).
        entry: String,
        /// The callable it names (`posix.system`).
        kind: String,
    },
    /// Weights stored as a pickle, which only running Python code could load.
    #[error(
        "{} is a PyTorch pickle, which headlab never unpickles (loading one runs code). Convert \
         it to safetensors first, e.g. in Python: `GPT2LMHeadModel.from_pretrained(DIR)\
         .save_pretrained(DIR, safe_serialization=True)`",
        path.display()
    )]
    Pickle {
        /// The `.bin` file.
        path: PathBuf,
    },
    /// A file that cannot be parsed.
    #[error("{} cannot be read: {why}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A config value headlab's model cannot take.
    #[error("{} sets {key} = {value}: {why}", path.display())]
    Unsupported {
        /// The config file.
        path: PathBuf,
        /// The key.
        key: String,
        /// Its value.
        value: String,
        /// What headlab supports.
        why: String,
    },
    /// A tensor whose shape does not fit the config.
    #[error(
        "{}: tensor {name} has shape {found:?}, but the config ({config}) needs {expected:?}",
        path.display()
    )]
    Shape {
        /// The weights file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Its shape in the file.
        found: Vec<usize>,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The config keys that imply it.
        config: String,
    },
    /// A tensor the model has no place for.
    #[error(
        "{}: tensor {name} is not part of a GPT-2 model with this config ({config}); is the \
         config the one these weights were saved with?",
        path.display()
    )]
    Unexpected {
        /// The weights file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// The config's shape.
        config: String,
    },
    /// The tokenizer cannot be read, or does not fit the model.
    #[error("{}: {source}", path.display())]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// Why.
        source: TokenizerError,
    },
    /// The tokenizer and the model disagree on the vocabulary.
    #[error(
        "the tokenizer ({}) has {tokens} tokens but the model's embedding has {rows} rows; \
         give the tokenizer the model was trained with",
        path.display()
    )]
    VocabMismatch {
        /// The tokenizer file.
        path: PathBuf,
        /// Its vocabulary size.
        tokens: usize,
        /// The model's.
        rows: usize,
    },
    /// The config does not build a model.
    #[error("{}: {source}", path.display())]
    Config {
        /// The config file.
        path: PathBuf,
        /// Why.
        source: GptConfigError,
    },
    /// The run directory cannot be written.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The run config cannot be written.
    #[error(transparent)]
    RunConfig(#[from] ConfigError),
}

/// A model read from another tool, in GPT-2's names and layout, before it is a run.
#[derive(Debug)]
pub struct Imported {
    /// Its config, `vocab_size` included.
    pub config: GptConfig,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// Every tensor by its `GPT2LMHeadModel` name (`transformer.h.0.attn.c_attn.weight`),
    /// linears `[in, out]`: shape and row-major values.
    pub tensors: Tensors,
    /// The weights file, for errors.
    pub weights: PathBuf,
    /// Where it came from and what it said, for `import.json`.
    pub source: serde_json::Value,
}

/// Tensors by name: shape and row-major f32 values.
pub type Tensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// The `[model]` keys that fix a tensor's shape, for error messages.
fn shape_keys(c: &GptConfig) -> String {
    format!(
        "vocab_size {}, block_size {}, d_model {}, n_layers {}, n_heads {}, d_ff {}",
        c.vocab_size,
        c.block_size,
        c.d_model,
        c.n_layers,
        c.n_heads,
        c.mlp_width()
    )
}

/// Values of an element type headlab can widen to f32, as f32; `None` for any other type.
pub(crate) fn to_f32(dtype: &str, bytes: &[u8]) -> Option<Vec<f32>> {
    let pairs = || {
        bytes
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    match dtype {
        "F32" => Some(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        ),
        "BF16" => Some(
            pairs()
                .map(|h| f32::from_bits(u32::from(h) << 16))
                .collect(),
        ),
        "F16" => Some(pairs().map(|h| half::f16::from_bits(h).to_f32()).collect()),
        _ => None,
    }
}

impl Imported {
    /// The model these tensors make: every tensor of the config present with its shape, none
    /// left over. A bias-free config takes biases that are absent or all zero (what an export of one
    /// writes) and refuses others.
    pub fn build(&self, device: &Device) -> Result<Gpt, ImportError> {
        let c = &self.config;
        let mut model = Gpt::new(c, device).map_err(|source| ImportError::Config {
            path: self.weights.clone(),
            source,
        })?;
        let mut load = Loader {
            left: self.tensors.clone(),
            path: &self.weights,
            config: c,
            device,
        };
        // A padded vocabulary's rows are all read.
        let (v, d) = (c.embedding_rows(), c.d_model);
        let wte = load.take("transformer.wte.weight", &[v, d])?;
        model.wte.weight = load.t2(wte, v, d);
        if let Some(wpe) = &mut model.wpe {
            let w = load.take("transformer.wpe.weight", &[c.block_size, d])?;
            wpe.weight = load.t2(w, c.block_size, d);
        }
        for (i, block) in model.blocks.iter_mut().enumerate() {
            load.block(&format!("transformer.h.{i}"), block)?;
        }
        if let Some(ln_f) = &mut model.ln_f {
            load.layer_norm(ln_f, "transformer.ln_f")?;
        }
        if let Some(head) = &mut model.lm_head {
            // nn.Linear's [vocab, d] -> Burn's [d, vocab].
            let w = load.take("lm_head.weight", &[v, d])?;
            let w = Tensor::<2>::from_data(TensorData::new(w, [v, d]), device).transpose();
            head.weight = Param::from_tensor(w);
        }
        if let Some(name) = load.left.keys().next() {
            return Err(ImportError::Unexpected {
                path: self.weights.clone(),
                name: name.clone(),
                config: shape_keys(c),
            });
        }
        Ok(model)
    }

    /// Writes the run at `out` (which must not exist unless `force`, which replaces it): its
    /// config, tokenizer, `import.json`
    /// and the weights as checkpoints `best` and `last` at step 0, with a fresh optimizer.
    /// The run has no training text until `--set data.path=FILE` gives it one.
    pub fn write_run(
        &self,
        model: &Gpt,
        out: &Path,
        backend: &str,
        force: bool,
    ) -> Result<RunDir, ImportError> {
        let mut config = RunConfig::default();
        config.model = GptConfig {
            vocab_size: 0,
            ..self.config.clone()
        };
        config.train.backend = backend.to_string();
        let kind = self.tokenizer.kind();
        config.data = DataConfig {
            path: None,
            builtin: None,
            tokenizer: kind,
            vocab_size: if kind == TokenizerKind::Bpe {
                self.tokenizer.vocab_size()
            } else {
                DataConfig::default().vocab_size
            },
            ..DataConfig::default()
        };
        let run = RunDir::create_with(out, force, &config, &self.tokenizer, None)?;
        let written = (|| -> Result<(), ImportError> {
            let path = run.root.join(IMPORT_FILE);
            let json = serde_json::to_string_pretty(&self.source).expect("JSON") + "\n";
            write_atomic(&path, json.as_bytes())?;
            let optim = Optimizer::new(optimizer_config(&config.train));
            let state = TrainState {
                step: 0,
                best_val_loss: None,
                elapsed_s: 0.0,
                train_s: 0.0,
                pending_eval: false,
            };
            let trained_on = TrainedOn {
                backend: "import".into(),
                adapter: self.source["from"].as_str().map(str::to_string),
            };
            for name in ["best", "last"] {
                run.save_checkpoint(name, model, &optim, &state, &trained_on)?;
            }
            Ok(())
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&run.root);
            return Err(e);
        }
        Ok(run)
    }
}

/// Moves an import's tensors into a model's parameters one at a time, checking each shape.
/// A bias-free model may store no biases at all (nanoGPT's `bias=False` leaves them out of
/// every Linear and LayerNorm): a missing bias reads as zero, and a stored one must be zero.
struct Loader<'a> {
    /// The tensors not taken yet.
    left: Tensors,
    path: &'a PathBuf,
    config: &'a GptConfig,
    device: &'a Device,
}

impl Loader<'_> {
    /// Takes the tensor `name`, which must have `shape`.
    fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ImportError> {
        let Some((found, values)) = self.left.remove(name) else {
            if !self.config.bias && name.ends_with(".bias") {
                return Ok(vec![0.0; shape.iter().product()]);
            }
            return Err(ImportError::Missing {
                dir: self.path.clone(),
                format: "weights file for this config",
                what: format!("tensor {name}"),
            });
        };
        if found != shape {
            return Err(ImportError::Shape {
                path: self.path.clone(),
                name: name.into(),
                found,
                expected: shape.to_vec(),
                config: shape_keys(self.config),
            });
        }
        Ok(values)
    }

    fn t1(&self, v: Vec<f32>) -> Param<Tensor<1>> {
        let n = v.len();
        Param::from_tensor(Tensor::from_data(TensorData::new(v, [n]), self.device))
    }

    fn t2(&self, v: Vec<f32>, rows: usize, cols: usize) -> Param<Tensor<2>> {
        Param::from_tensor(Tensor::from_data(
            TensorData::new(v, [rows, cols]),
            self.device,
        ))
    }

    /// A bias-free model's stored bias `name` must be zero to be left out.
    fn zero_bias(&self, name: &str, values: &[f32]) -> Result<(), ImportError> {
        if values.iter().all(|&x| x == 0.0) {
            return Ok(());
        }
        Err(ImportError::Unsupported {
            path: self.path.clone(),
            key: "headlab.bias".into(),
            value: "false".into(),
            why: format!(
                "the model is bias-free, but {name} is not zero; drop headlab.bias from \
                 config.json to import the biases"
            ),
        })
    }

    /// A LayerNorm's scale and shift.
    fn layer_norm(&mut self, ln: &mut LayerNorm, name: &str) -> Result<(), ImportError> {
        let d = self.config.d_model;
        let gamma = self.take(&format!("{name}.weight"), &[d])?;
        ln.gamma = self.t1(gamma);
        let b = self.take(&format!("{name}.bias"), &[d])?;
        if self.config.bias {
            ln.beta = Some(self.t1(b));
            Ok(())
        } else {
            self.zero_bias(&format!("{name}.bias"), &b)
        }
    }

    /// A linear's `[in, out]` weight and its bias (named `name` in messages).
    fn linear(
        &self,
        lin: &mut Linear,
        w: Vec<f32>,
        b: Vec<f32>,
        name: &str,
    ) -> Result<(), ImportError> {
        let (d_in, d_out) = (w.len() / b.len(), b.len());
        lin.weight = self.t2(w, d_in, d_out);
        if self.config.bias {
            lin.bias = Some(self.t1(b));
            Ok(())
        } else {
            self.zero_bias(name, &b)
        }
    }

    /// The linear `{p}.{name}`: its `[d_in, d_out]` weight and `[d_out]` bias.
    fn take_linear(
        &mut self,
        lin: &mut Linear,
        p: &str,
        name: &str,
        [d_in, d_out]: [usize; 2],
    ) -> Result<(), ImportError> {
        let w = self.take(&format!("{p}.{name}.weight"), &[d_in, d_out])?;
        let b = self.take(&format!("{p}.{name}.bias"), &[d_out])?;
        self.linear(lin, w, b, &format!("{p}.{name}.bias"))
    }

    /// Block `p` (`transformer.h.<i>`): its LayerNorms, attention (GPT-2's fused `c_attn`
    /// split into q, k and v) and MLP.
    fn block(&mut self, p: &str, block: &mut Block) -> Result<(), ImportError> {
        let (d, ff) = (self.config.d_model, self.config.mlp_width());
        self.layer_norm(&mut block.ln_1, &format!("{p}.ln_1"))?;
        // [d, 3d] -> q, k, v of [d, d]: columns 0..d are q, d..2d k, 2d..3d v.
        let fused = self.take(&format!("{p}.attn.c_attn.weight"), &[d, 3 * d])?;
        let fused_bias = self.take(&format!("{p}.attn.c_attn.bias"), &[3 * d])?;
        let attn = &mut block.attn;
        for (j, proj) in [&mut attn.q_proj, &mut attn.k_proj, &mut attn.v_proj]
            .into_iter()
            .enumerate()
        {
            let w: Vec<f32> = fused
                .chunks_exact(3 * d)
                .flat_map(|row| &row[j * d..(j + 1) * d])
                .copied()
                .collect();
            let b = fused_bias[j * d..(j + 1) * d].to_vec();
            self.linear(proj, w, b, &format!("{p}.attn.c_attn.bias"))?;
        }
        self.take_linear(&mut attn.o_proj, p, "attn.c_proj", [d, d])?;
        if let Some(ln_2) = &mut block.ln_2 {
            self.layer_norm(ln_2, &format!("{p}.ln_2"))?;
        }
        if let Some(mlp) = &mut block.mlp {
            self.take_linear(&mut mlp.c_fc, p, "mlp.c_fc", [d, ff])?;
            self.take_linear(&mut mlp.c_proj, p, "mlp.c_proj", [ff, d])?;
        }
        Ok(())
    }
}

/// Reads a tokenizer file (`tokenizer.json`) in Hugging Face's format.
pub(crate) fn read_tokenizer_json(path: &Path) -> Result<Tokenizer, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|e| ImportError::Corrupt {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    Tokenizer::from_huggingface_json(&text).map_err(|source| ImportError::Tokenizer {
        path: path.to_path_buf(),
        source,
    })
}

/// A tokenizer given as a `tokenizer.json`, or a folder holding one or GPT-2's `vocab.json` +
/// `merges.txt`; `None` when the folder has neither.
pub(crate) fn find_tokenizer(path: &Path) -> Option<Result<Tokenizer, ImportError>> {
    if path.is_file() {
        return Some(read_tokenizer_json(path));
    }
    let json = path.join("tokenizer.json");
    if json.is_file() {
        return Some(read_tokenizer_json(&json));
    }
    let (vocab, merges) = (path.join("vocab.json"), path.join("merges.txt"));
    if vocab.is_file() && merges.is_file() {
        return Some(
            Tokenizer::from_vocab_merges(&vocab, &merges).map_err(|source| {
                ImportError::Tokenizer {
                    path: vocab,
                    source,
                }
            }),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    //! The fixtures under tests/fixtures were written by tools/make-fixtures.py with PyPI's
    //! `transformers` and `torch`: the logits there are theirs, not headlab's.
    use super::*;
    use crate::hf::{export_gpt2, gpt2_tensors, read_gpt2_folder};
    use crate::nanogpt::read_nanogpt;
    use burn::module::{Module, ModuleMapper};
    use burn::tensor::{Distribution, Int};
    use headlab_kernels::to_host;
    use headlab_model::Gelu;
    use serde_json::Value;

    fn fixture(path: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures")
            .join(path)
    }

    fn json(path: &Path) -> Value {
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    /// The largest |headlab - reference| over the logits of `ids`.
    fn worst_logit_error(model: &Gpt, ids: &[u32], expected: &Value, device: &Device) -> f64 {
        let input: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        let input = Tensor::<2, Int>::from_data(TensorData::new(input, [1, ids.len()]), device);
        let got = to_host::<f32, _>(model.forward(input));
        let rows = expected.as_array().unwrap();
        assert_eq!(rows.len(), ids.len());
        let vocab = got.len() / ids.len();
        let mut worst = 0f64;
        for (t, row) in rows.iter().enumerate() {
            let row = row.as_array().unwrap();
            assert_eq!(row.len(), vocab);
            for (v, e) in row.iter().enumerate() {
                worst = worst.max((f64::from(got[t * vocab + v]) - e.as_f64().unwrap()).abs());
            }
        }
        worst
    }

    fn ids(value: &Value) -> Vec<u32> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as u32)
            .collect()
    }

    #[test]
    fn a_transformers_gpt2_folder_gives_transformers_logits_and_tokens() {
        let device = Device::flex();
        let dir = fixture("hf-gpt2-tiny");
        let reference = json(&dir.join("logits.json"));
        let imported = read_gpt2_folder(&dir).unwrap();
        assert_eq!(imported.config.gelu, Gelu::Tanh);
        assert!(imported.config.bias);
        let model = imported.build(&device).unwrap();
        let worst = worst_logit_error(
            &model,
            &ids(&reference["ids"]),
            &reference["logits"],
            &device,
        );
        assert!(worst < 1e-4, "worst logit error {worst}");
        // The text encodes to the ids `tokenizers` gave it (whitespace runs across lines
        // included), and decodes back.
        let text = reference["text"].as_str().unwrap();
        let encoded = imported.tokenizer.encode(text).unwrap();
        assert_eq!(encoded, ids(&reference["text_ids"]));
        assert_eq!(imported.tokenizer.decode(&encoded), text);

        // GPT-2's older tokenizer files give the same tokenizer; names without
        // `transformer.` (GPT2Model's) the same weights.
        let other = tempfile::tempdir().unwrap();
        for file in ["config.json", "vocab.json", "merges.txt"] {
            std::fs::copy(dir.join(file), other.path().join(file)).unwrap();
        }
        let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let renamed: Vec<(String, safetensors::tensor::TensorView)> = st
            .tensors()
            .into_iter()
            .map(|(name, view)| (name.trim_start_matches("transformer.").to_string(), view))
            .collect();
        let file = safetensors::serialize(renamed, None).unwrap();
        std::fs::write(other.path().join("model.safetensors"), file).unwrap();
        let again = read_gpt2_folder(other.path()).unwrap();
        assert_eq!(again.tokenizer.encode(text).unwrap(), encoded);
        assert_eq!(again.tensors, imported.tensors);
    }

    #[test]
    fn a_nanogpt_checkpoint_gives_its_pytorch_logits() {
        let device = Device::flex();
        let dir = fixture("nanogpt-tiny");
        let reference = json(&dir.join("logits.json"));
        let imported = read_nanogpt(&dir.join("ckpt.pt"), None, None).unwrap();
        assert_eq!(imported.config.gelu, Gelu::Exact);
        assert_eq!(imported.source["iter_num"], 250);
        let model = imported.build(&device).unwrap();
        let ids = ids(&reference["ids"]);
        let worst = worst_logit_error(&model, &ids, &reference["logits"], &device);
        assert!(worst < 1e-4, "worst logit error {worst}");
        // meta.pkl's itos is the vocabulary: the ids are the reference text's characters.
        let text = reference["text"].as_str().unwrap();
        assert_eq!(imported.tokenizer.encode(text).unwrap(), ids);
    }

    /// A GPT-2 whose embedding has 320 rows for a tokenizer of 268 tokens (transformers loads
    /// it): the rows are kept, the logits are transformers' first 268, no sampled token is a
    /// padding row, and an export writes all 320 back, bit for bit.
    #[test]
    fn a_padded_vocabulary_keeps_its_rows_and_samples_only_tokens() {
        let device = Device::flex();
        let dir = fixture("hf-gpt2-padded");
        let reference = json(&dir.join("logits.json"));
        let imported = read_gpt2_folder(&dir).unwrap();
        let c = &imported.config;
        assert_eq!((c.vocab_size, c.embedding_rows()), (268, 320));
        let model = imported.build(&device).unwrap();
        let tokens: Vec<Value> = reference["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| Value::from(row.as_array().unwrap()[..268].to_vec()))
            .collect();
        let ids = ids(&reference["ids"]);
        let worst = worst_logit_error(&model, &ids, &Value::from(tokens), &device);
        assert!(worst < 1e-4, "worst logit error {worst}");
        // The padding rows' logits are there in transformers' output and larger than some
        // tokens', so only leaving them out keeps them from being sampled.
        let row = reference["logits"][0].as_array().unwrap();
        let top_pad = row[268..]
            .iter()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        let low_token = row[..268]
            .iter()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::MAX, f64::min);
        assert!(
            top_pad > low_token,
            "the fixture's padding rows would never be drawn"
        );
        let sampling = headlab_model::Sampling {
            temperature: 3.0,
            ..Default::default()
        };
        let drawn = model.generate(&ids[..4], 200, &sampling, |_| {}).unwrap();
        assert!(drawn.iter().all(|&t| t < 268), "{drawn:?}");

        let out = tempfile::tempdir().unwrap();
        let folder = out.path().join("hf");
        crate::hf::export_gpt2(&model, &imported.tokenizer, &folder, false).unwrap();
        let config = json(&folder.join("config.json"));
        assert_eq!(config["vocab_size"], 320);
        let again = read_gpt2_folder(&folder).unwrap();
        assert_eq!(again.config, imported.config);
        assert_eq!(
            again.tensors, imported.tensors,
            "weights differ after the round trip"
        );
    }

    /// nanoGPT's default `bias=False`: no bias in any Linear or LayerNorm, so the state dict
    /// has LayerNorm weights alone. It imports as a bias-free model with PyTorch's logits, and
    /// its parameter count is PyTorch's.
    #[test]
    fn a_bias_free_nanogpt_checkpoint_gives_its_pytorch_logits() {
        let device = Device::flex();
        let dir = fixture("nanogpt-nobias");
        let reference = json(&dir.join("logits.json"));
        let imported = read_nanogpt(&dir.join("ckpt.pt"), None, None).unwrap();
        assert!(!imported.config.bias);
        assert!(
            !imported.tensors.keys().any(|k| k.ends_with(".bias")),
            "the fixture has no biases"
        );
        let model = imported.build(&device).unwrap();
        let ids = ids(&reference["ids"]);
        let worst = worst_logit_error(&model, &ids, &reference["logits"], &device);
        assert!(worst < 1e-4, "worst logit error {worst}");
        // Every stored value is one parameter of headlab's model, and nothing else is: the
        // tied head is stored once (wte), the causal mask not at all.
        let stored: usize = imported.tensors.values().map(|(_, v)| v.len()).sum();
        assert_eq!(model.num_params(), stored);
        assert_eq!(imported.config.param_count(true), stored);
    }

    /// Every weight shifted by noise, so zero biases and unit LayerNorm scales are not
    /// what an import would produce by accident.
    struct Perturb;
    impl ModuleMapper for Perturb {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            param.map(|t| {
                let noise = Tensor::random(t.shape(), Distribution::Normal(0.0, 0.3), &t.device());
                t + noise
            })
        }
    }

    #[test]
    fn an_exported_run_imports_back_bit_for_bit() {
        let device = Device::flex();
        let text = "to be, or not to be:\nthat is the question.\n";
        for (bias, tie, tokenizer) in [
            (true, true, Tokenizer::char_from_corpus(text).unwrap()),
            (false, true, Tokenizer::byte()),
            (true, false, Tokenizer::train_bpe(text, 270).unwrap()),
        ] {
            let config = GptConfig::new(tokenizer.vocab_size())
                .with_block_size(8)
                .with_d_model(12)
                .with_n_heads(3)
                .with_d_ff(Some(20))
                .with_bias(bias)
                .with_tie_embeddings(tie);
            device.seed(7);
            let model = Gpt::new(&config, &device).unwrap().map(&mut Perturb);
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("hf");
            export_gpt2(&model, &tokenizer, &out, false).unwrap();
            let imported = read_gpt2_folder(&out).unwrap();
            assert_eq!(imported.config, config, "bias {bias}, tied {tie}");
            let back = imported.build(&device).unwrap();
            // (Compared as a bool: a failure would print every weight.)
            let same = gpt2_tensors(&back) == gpt2_tensors(&model);
            assert!(
                same,
                "bias {bias}, tied {tie}: weights differ after the round trip"
            );
            assert_eq!(imported.tokenizer.kind(), tokenizer.kind());
            assert_eq!(
                imported.tokenizer.encode(text).unwrap(),
                tokenizer.encode(text).unwrap()
            );
            // The run it makes loads the same weights.
            let run = imported
                .write_run(&back, &dir.path().join("run"), "flex", false)
                .unwrap();
            let (_, trained, _) =
                headlab_train::run::open_trained(&run.root, None, "best").unwrap();
            let same = gpt2_tensors(&trained.model) == gpt2_tensors(&model);
            assert!(
                same,
                "bias {bias}, tied {tie}: the run's checkpoint differs"
            );
            assert!(!run.root.join(headlab_train::run::DATA_FILE).exists());
        }
    }

    #[test]
    fn files_that_do_not_fit_get_errors_naming_them() {
        let dir = fixture("hf-gpt2-tiny");
        let tmp = tempfile::tempdir().unwrap();
        let copy = |name: &str, edit: &dyn Fn(&Path)| {
            let to = tmp.path().join(name);
            std::fs::create_dir(&to).unwrap();
            for f in ["config.json", "model.safetensors", "tokenizer.json"] {
                std::fs::copy(dir.join(f), to.join(f)).unwrap();
            }
            edit(&to);
            to
        };
        let edit_config = |key: &'static str, value: Value| {
            move |to: &Path| {
                let mut c = json(&to.join("config.json"));
                c[key] = value.clone();
                std::fs::write(to.join("config.json"), c.to_string()).unwrap();
            }
        };
        let cases: Vec<(PathBuf, &str)> = vec![
            (
                copy("truncated", &|to| {
                    let b = std::fs::read(to.join("model.safetensors")).unwrap();
                    std::fs::write(to.join("model.safetensors"), &b[..b.len() / 2]).unwrap();
                }),
                "model.safetensors cannot be read",
            ),
            (
                copy("wide", &edit_config("n_embd", Value::from(64))),
                "has shape [300, 32], but the config",
            ),
            (
                copy("llama", &edit_config("model_type", Value::from("llama"))),
                "model_type = \"llama\"",
            ),
            (
                copy(
                    "relu",
                    &edit_config("activation_function", Value::from("relu")),
                ),
                "activation_function",
            ),
            (
                copy("pickle", &|to| {
                    std::fs::rename(to.join("model.safetensors"), to.join("pytorch_model.bin"))
                        .unwrap();
                }),
                "never unpickles",
            ),
            (
                copy("notok", &|to| {
                    std::fs::remove_file(to.join("tokenizer.json")).unwrap()
                }),
                "tokenizer.json (or vocab.json + merges.txt)",
            ),
            (tmp.path().join("nowhere"), "the folder itself"),
        ];
        let device = Device::flex();
        for (folder, needle) in cases {
            let err = read_gpt2_folder(&folder)
                .and_then(|imported| imported.build(&device).map(|_| ()))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{}: {err}", folder.display());
        }
        // A pickle that would run code is refused without running it.
        let nano = fixture("nanogpt-tiny");
        let err = read_nanogpt(
            &nano.join("ckpt.pt"),
            Some(&nano.join("evil-meta.pkl")),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("posix.system") && err.contains("ran nothing"),
            "{err}"
        );
    }
}
