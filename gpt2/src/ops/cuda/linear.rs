//! Linear layers through cuBLASLt with the bias, GELU (tanh form) or residual add in the GEMM's
//! epilogue: one kernel per layer where candle would run a GEMM and then slow elementwise passes.
//!
//! Row-major `y[n, m] = x[n, k] W[k, m]` is the column-major product `yᵀ = Wᵀ xᵀ`: A = W
//! (m x k, ld m), B = x (k x n, ld k), C = residual, D = y (m x n, ld m); the bias runs along m.
//! [`gemm`] is the general call (transposes, epilogue outputs) that the training op's forward and
//! backward products use too.
use super::super::linear::Epilogue;
use super::{address, alloc, cuda_storage, drv, tensor_address};
use candle_core::cuda::cudarc::cublaslt::{result as lt, sys};
use candle_core::cuda::cudarc::driver::sys::CUevent_flags;
use candle_core::cuda::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use candle_core::op::BackpropOp;
use candle_core::{DType, Result, Storage, Tensor};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;

/// cuBLAS's recommended workspace on Hopper.
const WORKSPACE_BYTES: usize = 32 << 20;
/// Heuristic candidates timed once per GEMM shape.
const CANDIDATES: usize = 6;

/// The candidate with the least time for two runs after a warm-up run (each run writes the
/// same output); `None` when none runs or the timing fails.
fn fastest(
    stream: &Arc<CudaStream>,
    candidates: &[sys::cublasLtMatmulHeuristicResult_t],
    run: &dyn Fn(&sys::cublasLtMatmulAlgo_t) -> Result<()>,
) -> Option<sys::cublasLtMatmulAlgo_t> {
    let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let mut best: Option<(f32, sys::cublasLtMatmulAlgo_t)> = None;
    for c in candidates {
        if run(&c.algo).is_err() {
            continue;
        }
        let start = stream.record_event(timing).ok()?;
        if run(&c.algo).and_then(|_| run(&c.algo)).is_err() {
            continue;
        }
        let end = stream.record_event(timing).ok()?;
        let ms = start.elapsed_ms(&end).ok()?;
        if best.is_none_or(|(b, _)| ms < b) {
            best = Some((ms, c.algo));
        }
    }
    best.map(|(_, a)| a)
}

/// Whether the cuBLASLt path takes these operands (same float dtype everywhere).
pub fn supports(x: &Tensor, weight: &Tensor, bias: &Tensor, epilogue: Epilogue) -> bool {
    let dt = x.dtype();
    let same = weight.dtype() == dt
        && bias.dtype() == dt
        && match epilogue {
            Epilogue::BiasResidual(r) => r.dtype() == dt && r.device().same_device(x.device()),
            _ => true,
        };
    same && matches!(dt, DType::F32 | DType::BF16 | DType::F16)
        && weight.device().same_device(x.device())
        && bias.device().same_device(x.device())
}

/// Largest power of two (up to 256) dividing an address: what cuBLASLt may assume.
fn alignment(ptr: u64) -> u32 {
    if ptr == 0 {
        256
    } else {
        (1u64 << ptr.trailing_zeros().min(8)) as u32
    }
}

struct Layout(sys::cublasLtMatrixLayout_t);
impl Drop for Layout {
    fn drop(&mut self) {
        // SAFETY: created by create_matrix_layout and destroyed once.
        let _ = unsafe { lt::destroy_matrix_layout(self.0) };
    }
}
struct Desc(sys::cublasLtMatmulDesc_t);
impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created by create_matmul_desc and destroyed once.
        let _ = unsafe { lt::destroy_matmul_desc(self.0) };
    }
}
struct Pref(sys::cublasLtMatmulPreference_t);
impl Drop for Pref {
    fn drop(&mut self) {
        // SAFETY: created by create_matmul_pref and destroyed once.
        let _ = unsafe { lt::destroy_matmul_pref(self.0) };
    }
}

fn lt_err(e: impl std::fmt::Debug) -> candle_core::Error {
    drv("cuBLASLt", e)
}

/// One column-major cuBLASLt product `D = op(A) op(B) (+ C)` with an epilogue: D is m x n, k the
/// reduction. Every matrix is a packed buffer: A is stored m x k (k x m when `trans_a`), B k x n
/// (n x k when `trans_b`), C, D and the epilogue's auxiliary output m x n; the bias has m entries.
pub(crate) struct Gemm {
    pub dtype: DType,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: u64,
    pub trans_a: bool,
    pub b: u64,
    pub trans_b: bool,
    /// Added to the product (beta = 1) when set.
    pub c: Option<u64>,
    pub d: u64,
    pub epilogue: sys::cublasLtEpilogue_t,
    pub bias: Option<u64>,
    /// GELU_AUX's pre-activation output.
    pub aux: Option<u64>,
}

/// What decides the algorithm: every field of a [`Gemm`] but the addresses, whose alignments
/// count instead, and TF32.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct PlanKey {
    dtype: DType,
    tf32: bool,
    mnk: (usize, usize, usize),
    trans: (bool, bool),
    epilogue: u32,
    residual: bool,
    aligns: [u32; 4],
}

struct LtState {
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    /// `None`: cuBLASLt has no algorithm for this product.
    algos: HashMap<PlanKey, Option<sys::cublasLtMatmulAlgo_t>>,
}

// SAFETY: the handle is only used under the mutex that owns it.
unsafe impl Send for LtState {}

/// Runs `g` on `stream`; `Ok(false)` (nothing launched) when cuBLASLt offers no algorithm for it,
/// e.g. an epilogue that this shape, alignment or dtype does not allow.
pub(crate) fn gemm(stream: &Arc<CudaStream>, g: &Gemm) -> Result<bool> {
    // One handle and workspace per device and thread: candle's CUDA stream is per thread, and a
    // workspace shared by two streams would be written by both at once.
    static STATE: OnceLock<Mutex<HashMap<(usize, ThreadId), LtState>>> = OnceLock::new();
    let tf32 = g.dtype == DType::F32 && candle_core::cuda::gemm_reduced_precision_f32();
    let (data_type, compute) = match g.dtype {
        DType::F32 if tf32 => (
            sys::cudaDataType_t::CUDA_R_32F,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        ),
        DType::F32 => (
            sys::cudaDataType_t::CUDA_R_32F,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
        DType::BF16 => (
            sys::cudaDataType_t::CUDA_R_16BF,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
        DType::F16 => (
            sys::cudaDataType_t::CUDA_R_16F,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
        other => return Err(candle_core::Error::UnsupportedDTypeForOp(other, "linear")),
    };
    let (m, n, k) = (g.m, g.n, g.k);
    let c_ptr = g.c.unwrap_or(g.d);
    let (alpha, beta) = (1f32, if g.c.is_some() { 1f32 } else { 0f32 });
    let aligns = [
        alignment(g.a),
        alignment(g.b),
        alignment(c_ptr),
        alignment(g.d).min(g.aux.map_or(256, alignment)),
    ];
    let key = PlanKey {
        dtype: g.dtype,
        tf32,
        mnk: (m, n, k),
        trans: (g.trans_a, g.trans_b),
        epilogue: g.epilogue as u32,
        residual: g.c.is_some(),
        aligns,
    };

    let mut states = STATE
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let owner = (stream.context().ordinal(), std::thread::current().id());
    let state = match states.entry(owner) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => {
            let handle = lt::create_handle().map_err(lt_err)?;
            // SAFETY: the workspace is scratch space that cuBLASLt writes before it reads.
            let workspace =
                unsafe { stream.alloc::<u8>(WORKSPACE_BYTES) }.map_err(|e| drv("workspace", e))?;
            e.insert(LtState {
                handle,
                workspace,
                algos: HashMap::new(),
            })
        }
    };

    // SAFETY (whole block): the descriptors are created here and live until the call returns;
    // every pointer addresses a live packed buffer of the size its layout states.
    unsafe {
        let layout = |rows: usize, cols: usize| -> Result<Layout> {
            lt::create_matrix_layout(data_type, rows as u64, cols as u64, rows.max(1) as i64)
                .map(Layout)
                .map_err(lt_err)
        };
        let a_l = if g.trans_a {
            layout(k, m)?
        } else {
            layout(m, k)?
        };
        let b_l = if g.trans_b {
            layout(n, k)?
        } else {
            layout(k, n)?
        };
        let c_l = layout(m, n)?;
        let desc =
            Desc(lt::create_matmul_desc(compute, sys::cudaDataType_t::CUDA_R_32F).map_err(lt_err)?);
        let set_desc = |attr, value: *const c_void, size| {
            lt::set_matmul_desc_attribute(desc.0, attr, value, size).map_err(lt_err)
        };
        use sys::cublasLtMatmulDescAttributes_t as D;
        for (attr, transposed) in [
            (D::CUBLASLT_MATMUL_DESC_TRANSA, g.trans_a),
            (D::CUBLASLT_MATMUL_DESC_TRANSB, g.trans_b),
        ] {
            let op: i32 = transposed.into(); // CUBLAS_OP_N = 0, CUBLAS_OP_T = 1
            set_desc(
                attr,
                (&op) as *const i32 as *const c_void,
                std::mem::size_of::<i32>(),
            )?;
        }
        set_desc(
            D::CUBLASLT_MATMUL_DESC_EPILOGUE,
            (&g.epilogue) as *const _ as *const c_void,
            std::mem::size_of::<sys::cublasLtEpilogue_t>(),
        )?;
        if let Some(bias) = &g.bias {
            set_desc(
                D::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                bias as *const u64 as *const c_void,
                std::mem::size_of::<u64>(),
            )?;
        }
        if let Some(aux) = &g.aux {
            let ld = m as i64;
            set_desc(
                D::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                aux as *const u64 as *const c_void,
                std::mem::size_of::<u64>(),
            )?;
            set_desc(
                D::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                (&ld) as *const i64 as *const c_void,
                std::mem::size_of::<i64>(),
            )?;
        }
        let ws = state.workspace.device_ptr(stream).0;
        let run_on = |algo: &sys::cublasLtMatmulAlgo_t, c: u64, d: u64| -> Result<()> {
            lt::matmul(
                state.handle,
                desc.0,
                (&alpha) as *const f32 as *const c_void,
                (&beta) as *const f32 as *const c_void,
                g.a as *const c_void,
                a_l.0,
                g.b as *const c_void,
                b_l.0,
                c as *const c_void,
                c_l.0,
                d as *mut c_void,
                c_l.0,
                algo,
                ws as *mut c_void,
                WORKSPACE_BYTES,
                stream.cu_stream() as *mut _,
            )
            .map_err(lt_err)
        };
        let run = |algo: &sys::cublasLtMatmulAlgo_t| run_on(algo, c_ptr, g.d);
        let algo = match state.algos.get(&key) {
            Some(a) => *a,
            None => {
                let pref = Pref(lt::create_matmul_pref().map_err(lt_err)?);
                let set_pref = |attr, value: *const c_void, size| {
                    lt::set_matmul_pref_attribute(pref.0, attr, value, size).map_err(lt_err)
                };
                use sys::cublasLtMatmulPreferenceAttributes_t as P;
                set_pref(
                    P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    (&WORKSPACE_BYTES) as *const usize as *const c_void,
                    std::mem::size_of::<usize>(),
                )?;
                for (attr, a) in [
                    P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                ]
                .into_iter()
                .zip(aligns.iter())
                {
                    set_pref(
                        attr,
                        a as *const u32 as *const c_void,
                        std::mem::size_of::<u32>(),
                    )?;
                }
                // The heuristic's first pick is often not the fastest (K = 1600 ran at half the
                // rate of K = 6400): time its first few candidates once per shape.
                let wanted = CANDIDATES;
                let mut found: Vec<sys::cublasLtMatmulHeuristicResult_t> =
                    vec![std::mem::zeroed(); wanted];
                let mut count = 0;
                let status = sys::cublasLtMatmulAlgoGetHeuristic(
                    state.handle,
                    desc.0,
                    a_l.0,
                    b_l.0,
                    c_l.0,
                    c_l.0,
                    pref.0,
                    wanted as i32,
                    found.as_mut_ptr(),
                    &mut count,
                );
                // A refusal (NOT_SUPPORTED, or INVALID_VALUE for an epilogue this layout does
                // not allow) means no algorithm; it is remembered like a found one.
                if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                    count = 0;
                }
                found.truncate(count.max(0) as usize);
                found.retain(|h| h.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS);
                let algo = match found.first() {
                    None => None,
                    Some(first) if found.len() == 1 => Some(first.algo),
                    Some(first) => {
                        // Timing runs each candidate three times: an in-place accumulation
                        // (C = D, e.g. a gradient sink) would take the product three times over,
                        // so it is timed on scratch memory.
                        let scratch = (g.c == Some(g.d))
                            .then(|| stream.alloc::<u8>(m * n * g.dtype.size_in_bytes()))
                            .transpose()
                            .map_err(|e| drv("scratch", e))?;
                        let timed = |algo: &sys::cublasLtMatmulAlgo_t| match &scratch {
                            Some(s) => {
                                let p = s.device_ptr(stream).0;
                                run_on(algo, p, p)
                            }
                            None => run(algo),
                        };
                        Some(fastest(stream, &found, &timed).unwrap_or(first.algo))
                    }
                };
                state.algos.insert(key, algo);
                algo
            }
        };
        match algo {
            Some(algo) => run(&algo)?,
            None => return Ok(false),
        }
    }
    Ok(true)
}

/// `x` [n, k], `weight` [k, m], `bias` [m] (and a residual [n, m]) -> [n, m], one cuBLASLt call.
pub fn linear(x: &Tensor, weight: &Tensor, bias: &Tensor, epilogue: Epilogue) -> Result<Tensor> {
    let x = x.contiguous()?;
    let weight = weight.contiguous()?;
    let bias = bias.contiguous()?;
    let residual = match epilogue {
        Epilogue::BiasResidual(r) => Some(r.contiguous()?),
        _ => None,
    };
    let (n, k) = x.dims2()?;
    let m = weight.dim(1)?;
    let dtype = x.dtype();
    let (storage, x_layout) = x.storage_and_layout();
    let cs = cuda_storage(&storage, "linear: expected a CUDA tensor")?;
    let stream = cs.device.cuda_stream();
    let x_ptr = address(cs, x_layout, &stream)?;
    let (out, d_ptr) = alloc(cs, dtype, n * m)?;
    drop(storage);
    let g = Gemm {
        dtype,
        m,
        n,
        k,
        a: tensor_address(&weight)?,
        trans_a: false,
        b: x_ptr,
        trans_b: false,
        c: residual.as_ref().map(tensor_address).transpose()?,
        d: d_ptr,
        epilogue: match epilogue {
            Epilogue::BiasGelu => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS,
            _ => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
        },
        bias: Some(tensor_address(&bias)?),
        aux: None,
    };
    if !gemm(&stream, &g)? {
        return Err(lt_err("no algorithm for this GEMM"));
    }
    Ok(Tensor::from_storage(
        Storage::Cuda(out),
        (n, m),
        BackpropOp::none(),
        false,
    ))
}
