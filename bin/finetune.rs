//! `finetune CONFIG [--set KEY=VALUE]... [--out DIR] [--resume] [--install-default]`: fine-tune GPT-2
//! with error-feedback top-k sparsified AdamW (or dense AdamW, the baseline).
use anyhow::Context;
use clap::Parser;
use gradsparse::run::{finetune, RunOptions};
use sparsetrain::RunArgs;

// glibc serves the logits-sized buffers of each step (tens of MB) with fresh mmaps and unmaps them
// on free, so every step pays page faults for them; mimalloc without purging keeps them for reuse.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (v2 and v3): -1 never returns freed memory to the OS.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

const SPIN_LIMIT_VAR: &str = "CANDLE_BARRIER_POOL_SPIN_LIMIT";

#[derive(Parser)]
#[command(
    name = "finetune",
    version = sparsetrain::VERSION,
    about = "Fine-tune GPT-2 with error-feedback top-k gradient sparsification (or dense AdamW)"
)]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// When the run finishes, install the trained model as the default tiny model (the cache's
    /// models/tiny-gpt2, which `model = "tiny"` in train-sae and extract then loads instead of the
    /// shipped weights). Without it the default model is never touched.
    #[arg(long)]
    install_default: bool,
}

fn main() -> anyhow::Result<()> {
    // SAFETY: sets a plain option before the training threads exist.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    // candle's CPU workers spin 25 000 times before parking between ops; on a machine shared with
    // other work that spinning takes the cores the matmuls need (20 tiny-model steps: 16 s of CPU
    // time at the default, 9 s at 100). Set before candle starts its pool.
    if std::env::var_os(SPIN_LIMIT_VAR).is_none() {
        std::env::set_var(SPIN_LIMIT_VAR, "100");
    }
    sparsetrain::init_tracing();
    let args = Args::parse();
    sparsetrain::record_build();
    if args.run.config_reference {
        print!("{}", sparsetrain::config_reference());
        return Ok(());
    }
    if let Some(code) = args.run.launch_ranks()? {
        sparsetrain::exit_with(code);
    }
    let config = &args.run.config()?;
    let opts = RunOptions {
        overrides: args.run.set,
        out: args.run.out,
        resume: args.run.resume,
        runs_root: None,
        stop: runtime::signal::StopSignal::install()?,
        progress_bar: true,
        build: sparsetrain::build_info(),
        install_default: args.install_default,
        group: None,
    };
    let result =
        finetune(config, &opts).with_context(|| format!("finetune {}", config.display()))?;
    let s = &result.summary;
    println!("run directory: {}", result.run_dir.display());
    println!(
        "steps: {}  tokens: {}  wall: {:.1} s  outcome: {:?}",
        s.progress.step, s.progress.tokens, s.progress.wall_s, s.outcome
    );
    if let Some(h) = result.unigram_entropy {
        println!(
            "unigram entropy of the training tokens: {h:.3} nats/token (context-free baseline)"
        );
    }
    if let Some(u) = result.unigram_eval_loss {
        println!(
            "best add-alpha unigram model on the eval tokens: {u:.3} nats/token (eval_loss baseline)"
        );
    }
    if let Some(m) = &s.final_eval {
        for (k, v) in m {
            println!("final {k}: {v:.4}");
        }
    }
    if let Some(dir) = &result.installed_tiny {
        println!("installed as the default tiny model: {}", dir.display());
    }
    sparsetrain::exit_with(result.exit_code)
}
