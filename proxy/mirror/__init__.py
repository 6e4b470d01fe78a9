"""Off the client path: shadow calls and the noise floor, rule-flip probes, overload shedding,
rule checks and analyzer plugins (the analysis worker) and the LLM judge. Each is an observer of
the gateway's hooks. Imports `proxy.gateway` and below; never a sibling (`rollout`, `replay`,
`report`).
"""

from .analysis import AnalysisWorker, CompiledRules, answer_of
from .llm_judge import Judge
from .probes import ProbeDispatcher, probe_id
from .shadow import PrimaryAnswer, ShadowDispatcher

__all__ = [
    "AnalysisWorker",
    "CompiledRules",
    "Judge",
    "PrimaryAnswer",
    "ProbeDispatcher",
    "ShadowDispatcher",
    "answer_of",
    "probe_id",
]
