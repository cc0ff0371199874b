# A torch reference of flash_attn's apply_rotary_emb (x [B, S, H, D]), so that FA3's tests generate their rotary cases
# (tools/fa3_tests/run.py); FlashCore's own rotary is flashcore/rotary.py.
import torch


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None):
    assert cu_seqlens is None
    b, s = x.shape[:2]
    rd = cos.shape[1] * 2
    if isinstance(seqlen_offsets, torch.Tensor):
        off = seqlen_offsets.to(x.device).long()
    else:
        off = torch.full((b,), int(seqlen_offsets), device=x.device, dtype=torch.long)
    pos = off[:, None] + torch.arange(s, device=x.device)[None, :]
    c, sn = cos[pos].float()[:, :, None, :], sin[pos].float()[:, :, None, :]
    xr = x[..., :rd].float()
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack((x1 * c - x2 * sn, x1 * sn + x2 * c), dim=-1).flatten(-2)
    else:
        x1, x2 = xr[..., :rd // 2], xr[..., rd // 2:]
        out = torch.cat((x1 * c - x2 * sn, x1 * sn + x2 * c), dim=-1)
    return torch.cat((out.to(x.dtype), x[..., rd:]), dim=-1)
