"""A short "what am I looking at" note per tab, for students: what the view shows and the paper it comes from."""

from __future__ import annotations

import panel as pn

OPTIMUS = ("*Optimus: An Operator Fusion Framework for Deep Neural Networks*, Cai, Wang and Zhang, "
           "ACM Transactions on Embedded Computing Systems 22(1), 2022")
YANG = ("*A Systematic Approach to Blocking Convolutional Neural Networks*, Yang, Pu, Rister, Bhagdikar, "
        "Richardson, Kvatinsky, Ragan-Kelley, Pedram and Horowitz (Stanford), arXiv 2016")
COSMA = ("*Combined Scheduling, Memory Allocation and Tensor Replacement for Minimizing Off-Chip Data Accesses "
         "of DNN Accelerators*, Li, Gupta and Malik (Princeton), arXiv 2023")
MODULES = ("*A Simple Method to Reduce Off-chip Memory Accesses on Convolutional Neural Networks*, Kim, Kim, Ko "
           "and Ha, arXiv 2019")
LIMIT = ("*Mind the Gap: Attainable Data Movement and Operational Intensity Bounds for Tensor Algorithms*, Huang, "
         "Tsai, Emer and Parashar (NVIDIA), ISCA 2024")
PARTITION = "the DLA paper on extracting maximal convex subgraphs for an accelerator (Sec. 3)"

GUIDES = {
    "Fusion": f"""Each box is one operator of the network, drawn top to bottom in execution order; each shaded
outline is a **fused group**: its ops run together on chip, so only the group's inputs, outputs and weights
cross to DRAM (the legend gives each group's ops and DRAM bytes). The search for the fusion with the least
DRAM traffic is from {OPTIMUS}; a clicked op's loop nest is its best blocking after {YANG}. Colour by
CPU/accelerator part follows {PARTITION}; by module, {MODULES}. *Compare* draws another method's plan with
the groups that differ outlined thickly.""",
    "What-if curve": f"""DRAM traffic of every fusion method against the on-chip buffer size, with the Oracle (each
tensor crossing once) as the floor no plan can beat. A bigger buffer lets bigger groups fit, so traffic
falls in steps; click a point to move the slider there. Methods and the Oracle: {OPTIMUS}. *limit_layerwise* and
*limit_fused* are the least traffic any schedule could reach, op by op and with fusion: lower bounds after
{LIMIT}. Where *limit_fused_valid* shows, it is the looser per-op floor that *limit_fused* improves on.""",
    "Memory timeline": f"""How a scratchpad of the chosen budget holds the tensors over time: each rectangle is a
tensor's address range (up) for the steps it stays on chip (across); triangles mark spills to DRAM and
retrievals. COSMA orders ops, places tensors and picks what to spill in one ILP, against four simple
baselines; budgets M_R, M_H and M_P are the paper's: {COSMA}. On many networks the three budgets are
equal, and then the choice changes nothing.""",
    "Tables": """The numbers behind the views as CSV: each method's fused groups with their DRAM bytes, every op
with its group in the plan the DAG shows, the modules and the CPU/accelerator parts, and the whole report
as JSON.""",
    "Sweep": """Curves from a grid of runs made on the command line (`python -m engine sweep ... --out
file.parquet`), for comparing networks and accelerators side by side; pick the combination to draw.""",
}


GUIDE_TITLE = "What am I looking at? What this view shows, and the papers it comes from (click to open)"


def guide(tab: str) -> pn.Card:
    """The tab's note, folded: its title says what it holds. Open on every page load, it pushed each tab's view down
    for a returning user and for every page of a room that had read it once (issue 29)."""
    return pn.Card(pn.pane.Markdown(GUIDES[tab], sizing_mode="stretch_width"), title=GUIDE_TITLE,
                   collapsed=True, sizing_mode="stretch_width")
