"""Off the client path: shadow calls and the noise floor, overload shedding, rule checks and
analyzer plugins (the analysis worker) and the LLM judge. Each is an observer of the gateway's
hooks. Imports `proxy.gateway` and below; never a sibling (`rollout`, `replay`, `report`).
"""

from .analysis import AnalysisWorker, CompiledRules, answer_of
from .llm_judge import Judge
from .shadow import PrimaryAnswer, ShadowDispatcher

__all__ = [
    "AnalysisWorker",
    "CompiledRules",
    "Judge",
    "PrimaryAnswer",
    "ShadowDispatcher",
    "answer_of",
]
