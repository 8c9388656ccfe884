"""X-LAN captioner (Pan et al., CVPR 2020, section 3.3): X-Linear encoder over the regions, LSTM + X-Linear decoder.

- Encoder (3.3.2): regions embedded by Linear + activation + Dropout (the official att_embed; 2048 -> D_v = 1024),
  v^(0) = the masked mean region as the first query, K^(0) = V^(0) = the regions, then `encoder_blocks` (1 + M)
  stacked X-Linear layers (eqs. 7-8, `XLinearEncoderLayer`); the enhanced regions are V^(1+M).
- Global feature (eq. 10): v~ = W_G [v^(0); v^(1); ...; v^(1+M)], followed by a LayerNorm as in the official code.
- Decoder (3.3.3): x_t = [W_e w_t; v~; c_{t-1}], h_t = LSTM(x_t, h_{t-1}); v_d = X-Linear(query h_t, keys and
  values V^(1+M)); c_t = GLU(W_c [v_d; h_t]); log p(w_{t+1}) = log_softmax(W_p Dropout(c_t)).
- The Table 3 ablation ladder is this class with `encoder_blocks` 0..4 and `activation` relu (plain X-Linear
  blocks) or celu (the "+ELU" blocks, alpha 1.3 as in the official code). With 0 blocks the decoder attends to the
  embedded regions and v~ = W_G v^(0).

Choices and deviations:
- Eq. 8 updates keys and values with their own weights (the paper); the official code keeps one tensor for both.
- The paper lists h_{t-1} in the LSTM input; it is the LSTM's own recurrent input here (an extra copy in x_t adds
  weights of the same function class). c_{t-1} enters through a dropout, as the official code does (ctx_drop).
- The official code wraps the decoder's X-Linear block in LN(Linear([h_t; v_d])) before the GLU; the paper feeds
  [v_d; h_t] to the GLU directly, and so does this class.
- The region embedding uses the model's activation (ReLU for the plain ladder, CELU for X-LAN), so the "+ELU"
  step changes only the activation, as in the paper's ablation.
- Keys and values of the decoder's block are projected once per image in `encode`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..modules.additive import masked_mean
from ..modules.xlinear import ACTIVATIONS, XLinearAttention, XLinearEncoderLayer
from .base import Captioner


@dataclass(frozen=True)
class XLANArgs:
    embed_dim: int = 1024
    hidden_dim: int = 1024  # D: region embedding, X-Linear blocks, LSTM and context size
    heads: int = 8
    encoder_blocks: int = 4  # 1 + M stacked X-Linear layers (the paper's M = 3); 0 = decoder-only (Table 3 (b))
    activation: str = "celu"  # celu: the "+ELU" (infinity-order) blocks; relu: plain X-Linear blocks
    dropout: float = 0.5  # word embedding and output
    feature_dropout: float = 0.5  # region embedding
    ctx_dropout: float = 0.5  # c_{t-1} in the LSTM input
    attention_dropout: float = 0.1  # the blocks' shared embedding (0 in the official SCST config)
    block_dropout: float = 0.5  # encoder block outputs and key/value updates

    def __post_init__(self) -> None:
        if self.hidden_dim % self.heads:
            raise ValueError(f"hidden_dim {self.hidden_dim} must be divisible by heads {self.heads}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, not {self.activation!r}")
        if self.encoder_blocks < 0:
            raise ValueError("encoder_blocks must be at least 0")


class XLAN(Captioner):
    Args = XLANArgs
    INPUTS = ("regions",)

    def __init__(self, args: XLANArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        d = args.hidden_dim
        self.feature_embed = nn.Sequential(nn.Linear(input_dims["regions"], d), ACTIVATIONS[args.activation](),
                                           nn.Dropout(args.feature_dropout))
        self.encoder = nn.ModuleList(
            XLinearEncoderLayer(d, args.heads, args.activation, args.heads, args.attention_dropout, args.block_dropout)
            for _ in range(args.encoder_blocks))
        self.global_embed = nn.Sequential(nn.Linear((1 + args.encoder_blocks) * d, d), nn.LayerNorm(d))  # W_G
        self.word_embed = nn.Sequential(nn.Embedding(vocab_size, args.embed_dim), nn.ReLU(), nn.Dropout(args.dropout))
        self.lstm = nn.LSTMCell(args.embed_dim + 2 * d, d)
        self.ctx_dropout = nn.Dropout(args.ctx_dropout)
        self.attention = XLinearAttention(d, args.heads, activation=args.activation, groups=args.heads,
                                          dropout=args.attention_dropout)
        self.context = nn.Linear(2 * d, 2 * d)  # W_c, then GLU
        self.dropout = nn.Dropout(args.dropout)
        self.logits = nn.Linear(d, vocab_size)

    def encode(self, inputs):
        feats, mask = inputs["regions"]
        keys = values = self.feature_embed(feats)
        query = masked_mean(values, mask)  # v^(0)
        attended = [query]
        for layer in self.encoder:
            query, keys, values = layer(query, keys, values, mask)
            attended.append(query)
        global_feature = self.global_embed(torch.cat(attended, -1))
        return (mask, global_feature, *self.attention.project_kv(values, values))

    def init_state(self, encoded, batch_size):
        zeros = encoded[1].new_zeros(batch_size, self.args.hidden_dim)
        return zeros, zeros, zeros  # h, LSTM memory, context c_{t-1}

    def step(self, words, state, encoded):
        mask, global_feature, keys, values = encoded
        h, m, ctx = state
        h, m = self.lstm(torch.cat([self.word_embed(words), global_feature, self.ctx_dropout(ctx)], 1), (h, m))
        attended, _ = self.attention.attend(h, keys, values, mask)
        ctx = F.glu(self.context(torch.cat([attended, h], 1)), dim=-1)
        logprobs = torch.log_softmax(self.logits(self.dropout(ctx)), dim=-1)
        return logprobs, (h, m, ctx)


MODEL = XLAN
