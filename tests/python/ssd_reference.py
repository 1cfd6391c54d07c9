"""Float64 references of mamba_chunk_scan_combined in pure PyTorch (math §2, ../shared/docs/ssd-math.md).

`chunked` is the chunked algorithm of §2.3 with every option (D per head or per (head, headdim), z,
dt_bias, softplus, dt_limit clamp, initial_states, seq_idx, a partial last chunk); it is vectorized
over chunks, so it runs on the GPU at test sizes, and its autograd gives the float64 gradients the
GPU tests compare against. `naive` is the recurrence of §2.1, one time step at a time; the CPU
tests check that both agree (tests/python/test_reference.py).

Both take the arguments of mamba_chunk_scan_combined (any dtypes; everything is computed in
float64) and return (out, final_states).
"""
import math

import torch
import torch.nn.functional as F


def _preprocess(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_limit):
    f = torch.float64
    x, dt, A, B, C = x.to(f), dt.to(f), A.to(f), B.to(f), C.to(f)
    u = dt + dt_bias.to(f) if dt_bias is not None else dt
    v = F.softplus(u) if dt_softplus else u  # threshold 20: u itself above it, as the kernels
    delta = torch.clamp(v, min=float(dt_limit[0]), max=float(dt_limit[1]))
    b, L = x.shape[:2]
    q = seq_idx.long() if seq_idx is not None else torch.zeros(b, L, dtype=torch.long, device=x.device)
    D = D.to(f) if D is not None else None
    z = z.to(f) if z is not None else None
    init = initial_states.to(f) if initial_states is not None else None
    return x, delta, A, B, C, D, z, init, q


def _finish(y, x, D, z):
    h, p = x.shape[2], x.shape[3]
    if D is not None:
        y = y + (D.view(1, 1, h, 1) if D.dim() == 1 else D.view(1, 1, h, p)) * x
    if z is not None:
        y = y * F.silu(z)
    return y


def chunked(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None,
            dt_softplus=False, dt_limit=(0.0, float("inf"))):
    x, delta, A, B, C, D, z, init, q = _preprocess(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
                                                   dt_softplus, dt_limit)
    b, L, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    Q = chunk_size
    nc = math.ceil(L / Q)
    pad = nc * Q - L
    # Padding: Δ = 0 (no contribution, A_c(Q-1) = A_c(λ_c)), ids continue the last one.
    xp = F.pad(x, (0, 0, 0, 0, 0, pad))
    Bp = F.pad(B, (0, 0, 0, 0, 0, pad)).repeat_interleave(h // g, dim=2)
    Cp = F.pad(C, (0, 0, 0, 0, 0, pad)).repeat_interleave(h // g, dim=2)
    dlt = F.pad(delta, (0, 0, 0, pad)).view(b, nc, Q, h)
    qp = torch.cat([q, q[:, -1:].expand(b, pad)], dim=1).view(b, nc, Q)
    xc, Bc, Cc = xp.view(b, nc, Q, h, p), Bp.view(b, nc, Q, h, n), Cp.view(b, nc, Q, h, n)

    cs = torch.cumsum(dlt * A, dim=2)                                       # 𝒜_c(l), (b, nc, Q, h)
    q_end = qp[:, :, -1]                                                     # q(cQ + λ_c)
    q_prev = torch.cat([torch.zeros_like(qp[:, :1, 0]), qp[:, :-1, -1]], dim=1)  # q(cQ - 1), q(-1) = 0
    xi = (qp == q_end[..., None]).to(x.dtype)                                # ξ_c(l)
    eta = (qp == q_prev[..., None]).to(x.dtype)                              # η_c(l)
    theta = (q_end == q_prev).to(x.dtype)                                    # θ_c

    # F2: chunk states; F3: state passing (P_c enters chunk c).
    w = torch.exp(cs[:, :, -1:, :] - cs) * dlt * xi[..., None]
    s = torch.einsum("bclh,bclhp,bclhn->bchpn", w, xc, Bc)
    S = init if init is not None else x.new_zeros(b, h, p, n)
    P = []
    for c in range(nc):
        P.append(S)
        S = (theta[:, c, None, None, None] * torch.exp(cs[:, c, -1, :])[..., None, None]) * S + s[:, c]
    P = torch.stack(P, dim=1)

    # F4 + F5: intra-chunk (masked causal decay) and from-state terms.
    causal = torch.ones(Q, Q, dtype=torch.bool, device=x.device).tril()
    visible = causal & (qp[..., :, None] == qp[..., None, :])                # (b, nc, l, s)
    diff = cs[:, :, :, None, :] - cs[:, :, None, :, :]                       # (b, nc, l, s, h)
    decay = torch.exp(diff.masked_fill(~visible[..., None], float("-inf")))
    CB = torch.einsum("bclhn,bcshn->bclsh", Cc, Bc)
    y = torch.einsum("bclsh,bcsh,bcshp->bclhp", CB * decay, dlt, xc)
    y = y + torch.einsum("bclhn,bchpn->bclhp", Cc, P) * (torch.exp(cs) * eta[..., None])[..., None]
    y = y.reshape(b, nc * Q, h, p)[:, :L]
    return _finish(y, x, D, z), S


def naive(x, dt, A, B, C, chunk_size=None, D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None,
          dt_softplus=False, dt_limit=(0.0, float("inf"))):
    """H_t = ε_t e^{Δ_t A} H_{t-1} + Δ_t x_t B_tᵀ, y_t = H_t C_t (chunk_size is unused)."""
    x, delta, A, B, C, D, z, init, q = _preprocess(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
                                                   dt_softplus, dt_limit)
    b, L, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    Bh = B.repeat_interleave(h // g, dim=2)
    Ch = C.repeat_interleave(h // g, dim=2)
    H = init if init is not None else x.new_zeros(b, h, p, n)
    ys = []
    for t in range(L):
        prev = q[:, t - 1] if t > 0 else torch.zeros_like(q[:, 0])
        eps = (q[:, t] == prev).to(x.dtype)[:, None, None, None]
        decay = torch.exp(delta[:, t] * A)[..., None, None]
        H = eps * decay * H + (delta[:, t, :, None, None] * x[:, t, :, :, None]) * Bh[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", H, Ch[:, t]))
    y = torch.stack(ys, dim=1)
    return _finish(y, x, D, z), H
