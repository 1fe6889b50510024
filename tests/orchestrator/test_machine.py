"""The machine line printed beside every figure: the CPU model and the vector instructions that change
floating-point results and speed."""

from orchestrator.machine import cpu, describe

ZEN3 = """processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 1
model name	: AMD EPYC 7B13
flags		: fpu sse sse2 avx fma avx2 bmi2

processor	: 1
model name	: something the first block already said
"""

SAPPHIRE_RAPIDS = """processor	: 0
cpu family	: 6
model		: 143
model name	: Intel(R) Xeon(R) Platinum 8481C
flags		: avx avx2 avx512f avx512_bf16 amx_tile amx_bf16
"""


def test_the_cpu_line_names_the_model_and_the_instructions_it_has_and_lacks():
    assert cpu(ZEN3) == "AMD EPYC 7B13 (family 25 model 1; avx2; no avx512f avx512_bf16 amx_tile)"
    assert cpu(SAPPHIRE_RAPIDS) == "Intel(R) Xeon(R) Platinum 8481C (family 6 model 143; avx2 avx512f avx512_bf16 amx_tile)"


def test_the_machine_line_reads_this_machine():
    line = describe()
    assert " cores, Python 3." in line and line.split(",")[0]
