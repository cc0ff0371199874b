# FA3's Python names, served by FlashCore (tools/fa3_tests/run.py: FA3's own tests pointed at FlashCore).
from flashcore import flash_attn_combine as flash_attn_combine
from flashcore import flash_attn_func as flash_attn_func
from flashcore import flash_attn_varlen_func as flash_attn_varlen_func
from flashcore import flash_attn_with_kvcache as flash_attn_with_kvcache
from flashcore import get_scheduler_metadata as get_scheduler_metadata
