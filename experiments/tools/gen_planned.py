#!/usr/bin/env python3
"""One-off generator of the planned specs (status: planned) from the catalogue in
../shared/EXPERIMENTS.md and the papers. Kept so the choices are reviewable; edit the YAML files
directly from now on (an implemented spec is maintained by hand). Does not overwrite an existing
file unless --force is given."""
import json, os, sys

CIT = {
    "netreduce": "S. Liu, Q. Wang, J. Zhang, W. Wu, Q. Lin, Y. Liu, M. Xu et al., In-Network Aggregation with Transport Transparency for Distributed Training, ASPLOS 2023",
    "libra": "H. Pan, P. Cui, Z. Li, R. Jia, P. Zhang, L. Zhang, Y. Yang, J. Wu et al., Libra: In-network Gradient Aggregation for Speeding up Distributed Sparse Deep Training",
    "aleph": "P. Yang, H. Xu, G. Zhao, Q. Zhang, J. Liu, C. Qiao, ALEPH: Accelerating Distributed Training with eBPF-based Hierarchical Gradient Aggregation (IEEE)",
    "p4sgd": "P4SGD: Programmable Switch Enhanced Model-Parallel Training on Generalized Linear Models on Distributed FPGAs",
    "luwu": "M. Sun, Z. Yang, C. Liao, Y. Li, F. Wu, Z. Wang, LuWu: An End-to-End In-Network Out-of-Core Optimizer for 100B-Scale Model-in-Network Data-Parallel Training on Distributed GPUs",
}

def M(name, unit, better, desc=""):
    return {"name": name, "unit": unit, "better": better, "description": desc}

def V(system, metric, value, **params):
    d = {"system": system, "metric": metric, "value": value}
    if params:
        d["params"] = params
    return d

def C(id, text, expr, fidelity=None, tolerance=None):
    d = {"id": id, "text": text, "expr": expr}
    if fidelity:
        d["fidelity"] = fidelity
    if tolerance:
        d["tolerance"] = tolerance
    return d

def F(id, title, kind, y, x=None, series=None, log_x=False, log_y=False, x_label=None, y_label=None):
    d = {"id": id, "title": title, "kind": kind, "y": y}
    if x: d["x"] = x
    if series: d["series"] = series
    if log_x: d["log_x"] = True
    if log_y: d["log_y"] = True
    if x_label: d["x_label"] = x_label
    if y_label: d["y_label"] = y_label
    return d

E = []
def X(**kw):
    E.append(kw)

# ---------------------------------------------------------------- NetReduce
X(id="netreduce-table1", artifact="Table 1", title="Host I/O stacks: RoCE vs parallel DMA (ATP) vs DPDK (SwitchML)",
  description="CPU usage, throughput and RTT of three host I/O designs at 100 Gbps: RoCE (NIC-offloaded transport), ATP's parallel DMA with multiple threads, and SwitchML's DPDK busy polling. The suite reproduces it with I/O models on this host (batched event-driven RC transport, ATP-style multi-threaded I/O, busy-polling) on the udp fabric; the RoCE row needs an RDMA NIC and is hardware only.",
  systems=["roce", "parallel_dma", "dpdk"], fidelity=["hardware", "emulated"],
  params={"workers": 2}, quick={"message_kb": [64]}, full={"message_kb": [4, 64, 1024]}, est=(20, 300),
  metrics=[M("cpu", "%", "lower", "CPU of the host stack, percent of one core"), M("throughput", "Gbps", "higher"), M("rtt", "us", "lower")],
  paper=("Table 1", None, [V("roce","cpu",25.6),V("roce","throughput",84.2),V("roce","rtt",5.7),V("parallel_dma","cpu",100),V("parallel_dma","throughput",58.67),V("parallel_dma","rtt",70.2),V("dpdk","cpu",200),V("dpdk","throughput",90.5),V("dpdk","rtt",20.5)]),
  claims=[C("roce-least-cpu","RoCE uses the least CPU of the three I/O stacks (Sec. 2, Table 1)","cpu(roce) < min(cpu(parallel_dma), cpu(dpdk))",["hardware"]),
          C("roce-lowest-rtt","RoCE has the lowest RTT (Table 1)","rtt(roce) < min(rtt(parallel_dma), rtt(dpdk))",["hardware"]),
          C("dpdk-busy-poll-cpu","DPDK busy polling costs more CPU than the event-driven stacks (Table 1)","cpu(dpdk) > cpu(parallel_dma)")],
  figures=[F("table1","Table 1: host I/O stacks","bars","throughput",series=["system"])])

X(id="netreduce-table6", artifact="Table 6", title="Microbenchmark: ATP, SwitchML, SwitchML-RDMA and NetReduce, 6 workers",
  description="Best-effort all-reduce among six workers: throughput (wire bits incl. headers) and goodput (gradient bits) per worker, CPU per worker (percent of one core), RTT (first packet of a message to its result) and switch overhead, for ATP, SwitchML, SwitchML-RDMA and NetReduce. Emulated on the mem/udp fabrics with the systems' sans-IO code and software switch models; simulated at the paper's 100 Gbps with its MTU and window. We report algorithm bandwidth and elements per second, not ring-style bus bandwidth. NetReduce's parameters from Sec. 5.1: window N=2 messages, 170 packets per message, 1 KB payload.",
  systems=["atp", "switchml", "switchml_rdma", "netreduce"], fidelity=["hardware", "emulated", "simulated"],
  params={"workers": 6, "line_rate_gbps": 100, "mtu": 1024, "window": 2, "msg_packets": 170},
  quick={"elements": [262144]}, full={"elements": [1048576, 16777216]}, est=(40, 900), reps=(3, 10),
  metrics=[M("throughput","Gbps","higher","wire bits per second per worker, all headers included"),M("goodput","Gbps","higher","gradient bits per second per worker"),M("cpu","%","lower","CPU per worker, percent of one core"),M("rtt","us","lower","first packet of a message to its aggregated result"),M("switch_overhead","%","lower","switch bandwidth or ports the system consumes (from the switch model)"),M("algbw","Gbps","higher","algorithm bandwidth: gradient bytes / all-reduce time"),M("elements_per_s","1/s","higher","gradient elements all-reduced per second")],
  paper=("Table 6", "switch overhead: ATP 50% internal bandwidth (recirculation), SwitchML-RDMA 75% of ports (loopback), NetReduce 50% of switch ports (accelerator attachment); SwitchML's is not given",
         [V("atp","throughput",50.3),V("atp","goodput",39.7),V("atp","cpu",128),V("atp","rtt",751),V("atp","switch_overhead",50),
          V("switchml","throughput",46.8),V("switchml","goodput",32.7),V("switchml","cpu",130),V("switchml","rtt",812),
          V("switchml_rdma","throughput",89.4),V("switchml_rdma","goodput",82.7),V("switchml_rdma","cpu",100),V("switchml_rdma","rtt",8.1),V("switchml_rdma","switch_overhead",75),
          V("netreduce","throughput",92.5),V("netreduce","goodput",86.8),V("netreduce","cpu",100),V("netreduce","rtt",6.3),V("netreduce","switch_overhead",50)]),
  claims=[C("netreduce-2x-atp","NetReduce's goodput is about twice ATP's (Sec. 5.2)","goodput(netreduce) >= 1.8 * goodput(atp)",tolerance="'about twice' read as at least 1.8x"),
          C("netreduce-2x-switchml","NetReduce's goodput is about twice SwitchML's (Sec. 5.2)","goodput(netreduce) >= 1.8 * goodput(switchml)",tolerance="'about twice' read as at least 1.8x"),
          C("netreduce-lowest-rtt","NetReduce has the lowest RTT (Table 6)","rtt(netreduce) == min(rtt(*))"),
          C("switchml-payload-bound","SwitchML's goodput is bounded by its small payload: at most 63% of line rate (Sec. 6)","goodput(switchml) <= 0.63 * line_rate_gbps")],
  figures=[F("table6-goodput","Table 6: goodput per worker","bars","goodput",series=["system"]),F("table6-rtt","Table 6: RTT","bars","rtt",series=["system"],log_y=True)])

X(id="netreduce-reliability", artifact="Sec. 3.2 (beyond the paper)", title="Goodput and exactly-once correctness under loss, duplication and reordering",
  description="Beyond the paper: the four Table 6 systems under packet loss 0, 0.01%, 0.1% and 1% plus duplication and reordering injected by the fabric with a seeded generator; every aggregate is checked bit-exact against a reference sum (integers) or within the documented quantisation error (block floating point). Goodput against loss is drawn.",
  systems=["atp","switchml","switchml_rdma","netreduce"], fidelity=["emulated","simulated"],
  params={"workers": 6, "elements": 262144, "duplicate": 0.001, "reorder": 0.001},
  quick={"loss": [0, 0.001, 0.01]}, full={"loss": [0, 0.0001, 0.001, 0.01]}, est=(60, 900),
  metrics=[M("goodput","Gbps","higher"),M("wrong_aggregates","1","lower","workers whose result differs from the reference sum"),M("retransmissions","1","lower")],
  paper=("none: beyond the paper", "the paper reports no loss experiment; the reference is the exact sum", []),
  claims=[C("exactly-once","Every aggregate equals the reference sum under loss, duplication and reordering (Sec. 3.2's exactly-once)","wrong_aggregates(*) == 0"),
          C("goodput-degrades-gracefully","Goodput falls as loss grows (go-back-N and timeouts cost)","decreasing(goodput(netreduce), loss)")],
  figures=[F("goodput-vs-loss","Goodput vs loss","lines","goodput",x="loss",series=["system"])])

X(id="netreduce-fig11", artifact="Fig. 11", title="Training throughput speedup vs ring all-reduce, 6 machines x 1 GPU",
  description="Training throughput of NetReduce and SwitchML relative to ring all-reduce for AlexNet, VGG16 and ResNet50 (A) and BERT/GPT-2 fine-tuning on GLUE-MNLI/QNLI/QQP and SQuAD (B), 6 machines with one GPU each. Modelled from the iteration model (compute from model FLOPs and an independent GPU speed, communication from the protocols' measured efficiency) and emulated with the real gradient sizes over the fabric with compute time emulated.",
  systems=["ring_allreduce","switchml","netreduce"], fidelity=["hardware","modelled","emulated"],
  params={"workers": 6},
  quick={"model": ["alexnet"]}, full={"model": ["alexnet","vgg16","resnet50","bert_mnli","bert_qnli","bert_qqp","bert_squad","gpt2"]}, est=(30, 3600),
  metrics=[M("speedup","x","higher","training throughput relative to ring all-reduce"),M("throughput","samples/s","higher")],
  paper=("Fig. 11", "AlexNet ratio from the text (1.45:1.18:1); NLP gains from the text", [V("netreduce","speedup",1.45,model="alexnet"),V("switchml","speedup",1.18,model="alexnet"),V("netreduce","speedup",1.346,model="bert_mnli"),V("netreduce","speedup",1.248,model="bert_qnli"),V("netreduce","speedup",1.273,model="bert_qqp"),V("netreduce","speedup",1.296,model="bert_squad"),V("netreduce","speedup",1.222,model="gpt2")]),
  claims=[C("netreduce-beats-switchml","NetReduce speeds training more than SwitchML (Fig. 11A)","speedup(netreduce) > speedup(switchml)"),
          C("netreduce-beats-ring","NetReduce is faster than ring all-reduce on every model (Fig. 11)","speedup(netreduce) > 1")],
  figures=[F("fig11","Fig. 11: speedup over ring all-reduce","bars","speedup",x="model",series=["system"])])

X(id="netreduce-fig12", artifact="Fig. 12", title="Loss difference ratio of NetReduce vs ring all-reduce over iterations",
  description="The loss difference ratio |L_inet - L_ring| / L_ring over training iterations, for real training of small models on CPU workers with every gradient aggregated through the systems' own protocol code (float32 sums at the accelerator as the paper states), and SwitchML's quantised aggregation beside it (beyond the paper).",
  systems=["netreduce","switchml"], fidelity=["hardware","functional"],
  params={"workers": 4},
  quick={"model": ["mlp"], "iteration": [100]}, full={"model": ["mlp","cnn"], "iteration": [100, 500, 1000, 2000]}, est=(60, 3600),
  metrics=[M("loss_diff_ratio","%","lower","|L_inet - L_ring| / L_ring")],
  paper=("Fig. 12", "read from the text: usually below 0.2%, up to 1.5% for ResNet50", [V("netreduce","loss_diff_ratio",0.2)]),
  claims=[C("loss-diff-small","The loss difference ratio stays below 0.2% (ResNet50 up to 1.5%) (Sec. 5.3)","loss_diff_ratio(netreduce) < 1.5",tolerance="1.5% is the paper's largest; 0.2% its usual")],
  figures=[F("fig12","Fig. 12: loss difference ratio","lines","loss_diff_ratio",x="iteration",series=["system","model"])])

t7 = dict(alexnet=(527.9,716.0,60.62,44.69,47.12,31.10), vgg16=(172.9,215.3,185.08,148.63,111.98,74.64), resnet50=(358.8,383.6,89.19,83.42,23.04,19.29))
vals = []
for m,(ri,ni,rit,nit,rc,nc) in t7.items():
    vals += [V("ring_allreduce","images_per_s",ri,model=m,batch=32,precision="fp16"),V("netreduce","images_per_s",ni,model=m,batch=32,precision="fp16"),
             V("ring_allreduce","iteration_ms",rit,model=m,batch=32,precision="fp16"),V("netreduce","iteration_ms",nit,model=m,batch=32,precision="fp16"),
             V("ring_allreduce","comm_ms",rc,model=m,batch=32,precision="fp16"),V("netreduce","comm_ms",nc,model=m,batch=32,precision="fp16")]
X(id="netreduce-table7", artifact="Fig. 13, Table 7", title="4 machines x 1 GPU: ring all-reduce vs NetReduce over batch size and precision",
  description="Training throughput of ring all-reduce and NetReduce on 4 machines with one V100 each over Fig. 13's batch sizes and FP16/FP32; Table 7 is its BS=32 FP16 cut (images/s, iteration ms, communication ms). Modelled with the iteration model (compute time from model FLOPs and an independent GPU speed with a sensitivity band; communication from the protocols' efficiency).",
  systems=["ring_allreduce","netreduce"], fidelity=["hardware","modelled"],
  params={"workers": 4},
  quick={"model": ["alexnet","vgg16","resnet50"], "batch": [32], "precision": ["fp16"]}, full={"model": ["alexnet","vgg16","resnet50"], "batch": [16,32,64,128], "precision": ["fp16","fp32"]}, est=(5, 30),
  metrics=[M("images_per_s","images/s","higher"),M("iteration_ms","ms","lower"),M("comm_ms","ms","lower")],
  paper=("Table 7", None, vals),
  claims=[C("netreduce-faster","NetReduce trains faster than ring all-reduce on all three models (Table 7)","images_per_s(netreduce) > images_per_s(ring_allreduce)"),
          C("comm-shorter","NetReduce's communication time is shorter (Table 7)","comm_ms(netreduce) < comm_ms(ring_allreduce)"),
          C("within-paper","Our modelled throughput is within 25% of the paper's (Table 7)","within(images_per_s(netreduce), paper(images_per_s(netreduce)), 25%)",["modelled"],"25%: compute speed comes from an independent source, not the paper")],
  figures=[F("fig13","Fig. 13: throughput vs batch size","lines","images_per_s",x="batch",series=["system","model","precision"])])

X(id="netreduce-table8", artifact="Table 8", title="AlexNet FP32 per-GPU throughput, 4 vs 32 GPUs",
  description="Per-GPU training throughput of AlexNet (FP32) for NetReduce and Flat Ring at 4 and 32 GPUs, batch 64 and 128, and the drop from 4 to 32. Modelled with the iteration model and Appendix A's structure for the multi-GPU case.",
  systems=["netreduce","flat_ring"], fidelity=["hardware","modelled"],
  params={"model": "alexnet", "precision": "fp32"},
  quick={"gpus": [4, 32], "batch": [64]}, full={"gpus": [4, 32], "batch": [64, 128]}, est=(5, 10),
  metrics=[M("images_per_s_per_gpu","images/s","higher")],
  paper=("Table 8", None, [V("netreduce","images_per_s_per_gpu",1372.2,gpus=4,batch=64),V("netreduce","images_per_s_per_gpu",938.4,gpus=32,batch=64),V("netreduce","images_per_s_per_gpu",2225.3,gpus=4,batch=128),V("netreduce","images_per_s_per_gpu",1555.5,gpus=32,batch=128),
                           V("flat_ring","images_per_s_per_gpu",1051.1,gpus=4,batch=64),V("flat_ring","images_per_s_per_gpu",585.2,gpus=32,batch=64),V("flat_ring","images_per_s_per_gpu",1912,gpus=4,batch=128),V("flat_ring","images_per_s_per_gpu",1037.2,gpus=32,batch=128)]),
  claims=[C("netreduce-scales-better","NetReduce loses less per-GPU throughput from 4 to 32 GPUs than Flat Ring (Table 8: -31% vs -45%)","images_per_s_per_gpu(netreduce)[gpus=32] > images_per_s_per_gpu(flat_ring)[gpus=32]")],
  figures=[F("table8","Table 8: per-GPU throughput","bars","images_per_s_per_gpu",x="gpus",series=["system","batch"])])

t9 = dict(alexnet=(307.5,328.8,519.2), vgg16=(115.2,122.2,173.6), resnet50=(276.0,282.8,317.6))
vals = []
for m,(a,b,c) in t9.items():
    vals += [V("flat_ring","images_per_s",a,model=m,batch=32,precision="fp16"),V("tencent_allreduce","images_per_s",b,model=m,batch=32,precision="fp16"),V("parallel_netreduce","images_per_s",c,model=m,batch=32,precision="fp16")]
X(id="netreduce-table9", artifact="Fig. 14, Table 9", title="32 GPUs (8 per machine): Flat Ring vs Tencent AllReduce vs Parallel NetReduce",
  description="Training throughput of FR, TA and PN on 4 machines x 8 V100 (NVLink) over Fig. 14's batch sizes and FP16/FP32; Table 9 is its BS=32 FP16 cut. Modelled with the iteration model and Appendix A's communication structure with NVLink and PCIe bandwidths as the paper states them.",
  systems=["flat_ring","tencent_allreduce","parallel_netreduce"], fidelity=["hardware","modelled"],
  params={"gpus": 32, "gpus_per_machine": 8},
  quick={"model": ["alexnet","vgg16","resnet50"], "batch": [32], "precision": ["fp16"]}, full={"model": ["alexnet","vgg16","resnet50"], "batch": [16,32,64,128], "precision": ["fp16","fp32"]}, est=(5, 30),
  metrics=[M("images_per_s","images/s","higher")],
  paper=("Table 9", None, vals),
  claims=[C("pn-fastest","Parallel NetReduce outperforms FR and TA on all three models (Table 9: +15.1-68.8% and +12.3-57.9%)","images_per_s(parallel_netreduce) > max(images_per_s(flat_ring), images_per_s(tencent_allreduce))")],
  figures=[F("fig14","Fig. 14: throughput vs batch size","lines","images_per_s",x="batch",series=["system","model","precision"])])

X(id="netreduce-table10", artifact="Table 10", title="Cost effectiveness from a bill of materials",
  description="CapEx and power of a NetReduce cluster relative to a plain RoCE cluster, from a bill of materials (experiments/netreduce/bom.yaml: the component prices and power as the paper lists them are inputs, since the table is arithmetic on them), against the speedups measured or modelled elsewhere.",
  systems=["netreduce"], fidelity=["modelled"],
  params={}, quick={"cluster": ["paper"]}, full={"cluster": ["paper"]}, est=(1, 1),
  metrics=[M("capex_increase","%","lower"),M("power_increase","%","lower")],
  paper=("Table 10", None, [V("netreduce","capex_increase",2.40),V("netreduce","power_increase",0.68)]),
  claims=[C("cheap","NetReduce adds +2.40% CapEx and +0.68% power (Table 10)","within(capex_increase(netreduce), paper(capex_increase(netreduce)), 5%) and within(power_increase(netreduce), paper(power_increase(netreduce)), 5%)")],
  figures=[F("table10","Table 10","table","capex_increase")])

# ---------------------------------------------------------------- Libra
X(id="libra-fig5", artifact="Fig. 5", title="CDF of parameter update frequency",
  description="The cumulative distribution of update frequency over parameters for the two production CTR tasks. Reproduced with the seeded sparse workload generator (its distribution parameters are inputs stated here, not fitted to the figure) and with any real trace a user provides.",
  systems=["libra"], fidelity=["functional"],
  params={}, quick={"task": ["oa_small"]}, full={"task": ["oa", "se"]}, est=(10, 600),
  metrics=[M("top30k_update_share","%","none","share of updates carried by the 30K most frequently updated parameters")],
  paper=("Fig. 5", "from the text", [V("libra","top30k_update_share",50,task="oa"),V("libra","top30k_update_share",70,task="se")]),
  claims=[C("skew","The top 30K parameters carry more than half of the updates in Task 1 (Sec. 2.2)","top30k_update_share(libra)[task=oa] > 50")],
  figures=[F("fig5","Fig. 5: update-frequency CDF","cdf","top30k_update_share",series=["task"])])

X(id="libra-fig12", artifact="Fig. 12", title="Aggregation throughput normalised to Libra, 5 models, 8/16/32 workers",
  description="Aggregation throughput of Libra, PS-lite (sparse) and SwitchML (dense) for OA, SE, DeepLight, LSTM and NCF at 8, 16 and 32 workers, normalised to Libra.",
  systems=["libra","ps_lite","switchml"], fidelity=["hardware","emulated","simulated"],
  params={}, quick={"model": ["oa"], "workers": [8]}, full={"model": ["oa","se","deeplight","lstm","ncf"], "workers": [8,16,32]}, est=(60, 3600),
  metrics=[M("throughput_norm","x","higher","aggregation throughput relative to Libra")],
  paper=("Fig. 12", "ranges from the text", [V("ps_lite","throughput_norm",0.25,workers=32)]),
  claims=[C("libra-beats-pslite","Libra is 1.5-4x PS-lite at 32 workers (Sec. 5.2)","throughput_norm(ps_lite)[workers=32] <= 1 / 1.5",tolerance="1.5x is the low end of the paper's range")],
  figures=[F("fig12","Fig. 12: normalised aggregation throughput","bars","throughput_norm",x="model",series=["system","workers"])])

X(id="libra-fig13", artifact="Fig. 13", title="Switch memory cap 1 MB vs 2 MB, 16 workers",
  description="Throughput of Libra and SwitchML with 1 MB and 2 MB of switch memory, 16 workers.",
  systems=["libra","switchml"], fidelity=["emulated","simulated"],
  params={"workers": 16}, quick={"memory_mb": [1, 2], "model": ["oa"]}, full={"memory_mb": [1, 2], "model": ["oa","se"]}, est=(60, 1200),
  metrics=[M("throughput_gain","%","higher","throughput gain of 2 MB over 1 MB")],
  paper=("Fig. 13", "from the text", [V("libra","throughput_gain",7,model="oa"),V("libra","throughput_gain",1.7,model="se")]),
  claims=[C("small-gain","Doubling switch memory helps Libra little (+7% OA, +1.7% SE) (Sec. 5.3)","throughput_gain(libra) < 10")],
  figures=[F("fig13","Fig. 13: memory cap","bars","throughput_gain",x="model",series=["system"])])

X(id="libra-fig14", artifact="Fig. 14", title="Throughput vs number of hot parameters",
  description="Normalised aggregation throughput as the number of hot parameters offloaded to the switch grows.",
  systems=["libra"], fidelity=["emulated","simulated"],
  params={"workers": 16}, quick={"hot_params_k": [10, 30, 60]}, full={"hot_params_k": [5,10,20,30,40,60,80,100]}, est=(60, 1800),
  metrics=[M("throughput_norm","x","higher")],
  paper=("Fig. 14", "no printed values: diminishing returns past the trade-off point", []),
  claims=[C("diminishing","Throughput grows with more hot parameters up to a trade-off point (Sec. 5.4)","increasing(throughput_norm(libra), hot_params_k)")],
  figures=[F("fig14","Fig. 14: throughput vs hot parameters","lines","throughput_norm",x="hot_params_k")])

X(id="libra-fig15", artifact="Fig. 15", title="Precision of sampled hot-parameter identification vs sampling rate",
  description="Precision |H_g ∩ H_s| / |H_g| of hot parameters identified by sampling (Sec. 3.3, Principle 1) against the sampling rate, with the paper's 1,000-at-a-time, 1% threshold procedure.",
  systems=["libra"], fidelity=["functional"],
  params={}, quick={"sampling_rate": [0.02, 0.04, 0.08]}, full={"sampling_rate": [0.01,0.02,0.04,0.06,0.08,0.1]}, est=(20, 600),
  metrics=[M("precision","%","higher")],
  paper=("Fig. 15", "from the text", [V("libra","precision",80,sampling_rate=0.04),V("libra","precision",90,sampling_rate=0.08)]),
  claims=[C("precision-4pct","Precision exceeds 80% at a 4% sampling rate (Sec. 5.5)","precision(libra)[sampling_rate=0.04] > 80"),
          C("precision-8pct","Precision exceeds 90% at 8% (Sec. 5.5)","precision(libra)[sampling_rate=0.08] > 90")],
  figures=[F("fig15","Fig. 15: precision vs sampling rate","lines","precision",x="sampling_rate")])

X(id="libra-fig16", artifact="Fig. 16", title="Recirculations per packet: heat-based layout + Algorithm 1 vs random layout",
  description="Recirculations per packet on the Tofino pipeline model (one access per register per pass) for Libra's heat-based placement with Algorithm 1's layout-aware packaging against a random layout.",
  systems=["libra","random_layout"], fidelity=["functional"],
  params={}, quick={"workers": [8]}, full={"workers": [8,16,32]}, est=(10, 300),
  metrics=[M("recirculations_per_packet","1","lower")],
  paper=("Fig. 16", "from the text", [V("libra","recirculations_per_packet",1),V("random_layout","recirculations_per_packet",10)]),
  claims=[C("fewer-recirculations","Libra needs under one recirculation per packet vs about ten for a random layout (Sec. 5.6)","recirculations_per_packet(libra) < 1 and recirculations_per_packet(random_layout) > 5",tolerance="'about 10' read as more than 5")],
  figures=[F("fig16","Fig. 16: recirculations per packet","bars","recirculations_per_packet",series=["system"])])

X(id="libra-fig17", artifact="Fig. 17", title="Extra delay per iteration of SwitchML's scaling-factor negotiation",
  description="The per-iteration delay that SwitchML's float-to-integer scaling-factor negotiation adds, against the number of workers.",
  systems=["switchml"], fidelity=["hardware","emulated"],
  params={}, quick={"workers": [8]}, full={"workers": [4,8,16,32]}, est=(30, 600),
  metrics=[M("negotiation_delay","ms","lower")],
  paper=("Fig. 17", "from the text", [V("switchml","negotiation_delay",100,workers=8),V("switchml","negotiation_delay",130,workers=32)]),
  claims=[C("grows-with-workers","The negotiation delay grows with the number of workers (Sec. 5.7)","increasing(negotiation_delay(switchml), workers)")],
  figures=[F("fig17","Fig. 17: negotiation delay","lines","negotiation_delay",x="workers")])

X(id="libra-table2", artifact="Table 2", title="Precision of float summation: float-to-int vs table lookup",
  description="Precision of summing float pairs with SwitchML's float-to-integer conversion (negotiated scale) and with Libra's table-lookup summation (Sec. 3.5: epoTable, three 12-bit logTables, expTables), on gradients (R1) and uniform (-1,1) values (R2), 100,000 pairs each; median and average precision.",
  systems=["float_to_int","table_lookup"], fidelity=["functional"],
  params={"pairs": 100000}, quick={"data": ["r1","r2"], "stat": ["median","average"]}, full={"data": ["r1","r2"], "stat": ["median","average"]}, est=(5, 20),
  metrics=[M("precision","%","higher")],
  paper=("Table 2", None, [V("float_to_int","precision",99.97,data="r1",stat="median"),V("float_to_int","precision",99.89,data="r1",stat="average"),V("float_to_int","precision",36.79,data="r2",stat="median"),V("float_to_int","precision",62.46,data="r2",stat="average"),
                           V("table_lookup","precision",99.92,data="r1",stat="median"),V("table_lookup","precision",99.87,data="r1",stat="average"),V("table_lookup","precision",100,data="r2",stat="median"),V("table_lookup","precision",99.84,data="r2",stat="average")]),
  claims=[C("lookup-robust","Table lookup keeps precision on uniform values where float-to-int collapses (Table 2)","precision(table_lookup)[data=r2] > precision(float_to_int)[data=r2]"),
          C("within-paper","Our precision is within 2 points of the paper's (Table 2)","within(precision(table_lookup), paper(precision(table_lookup)), 2%)")],
  figures=[F("table2","Table 2","bars","precision",x="data",series=["system","stat"])])

X(id="libra-fig18", artifact="Fig. 18", title="Training-time increase under packet loss",
  description="Increase of training time under packet loss 0.01%..0.1% with Libra's reliability mechanisms (switch-CPU copies of unacknowledged aggregation packets, rejection of repeated writes).",
  systems=["libra"], fidelity=["emulated","simulated"],
  params={"workers": 8}, quick={"loss": [0.0001, 0.001]}, full={"loss": [0.0001,0.0002,0.0005,0.001]}, est=(60, 1800),
  metrics=[M("time_increase","%","lower")],
  paper=("Fig. 18", "from the text", [V("libra","time_increase",3,loss=0.001)]),
  claims=[C("loss-tolerant","Training time grows less than 3% at 0.1% loss (Sec. 5.8)","time_increase(libra)[loss=0.001] < 3")],
  figures=[F("fig18","Fig. 18: time increase vs loss","lines","time_increase",x="loss")])

X(id="libra-resources", artifact="Sec. 5.7", title="Switch resources of the pipeline model",
  description="Switch memory and stages used by Libra on the Tofino pipeline model: hot-parameter registers, the float tables, logic, total against 20 MB.",
  systems=["libra"], fidelity=["functional"],
  params={"hot_params": 30000}, quick={"config": ["paper"]}, full={"config": ["paper"]}, est=(1, 1),
  metrics=[M("hot_param_kb","KB","lower"),M("float_tables_kb","KB","lower"),M("total_kb","KB","lower"),M("memory_share","%","lower"),M("stages","1","lower")],
  paper=("Sec. 5.7", None, [V("libra","hot_param_kb",118),V("libra","float_tables_kb",408.5),V("libra","total_kb",656.5),V("libra","memory_share",3.21),V("libra","stages",9)]),
  claims=[C("tables-size","The float tables take 408.5 KB as the paper counts them (Sec. 3.5)","within(float_tables_kb(libra), paper(float_tables_kb(libra)), 1%)"),
          C("fits","Libra fits in 12 stages","stages(libra) <= 12")],
  figures=[F("resources","Resources","table","total_kb")])

# ---------------------------------------------------------------- ALEPH
X(id="aleph-table1", artifact="Table 1", title="Motivating example: 4 workers (10/10/10/30 Gbps), PS 20 Gbps, 4.2 Gb gradients",
  description="Communication time of PS, ring all-reduce and ALEPH's hierarchical aggregation in the paper's motivating example with unequal worker bandwidth. Modelled in closed form and emulated with rate-limited hosts in network namespaces.",
  systems=["ps","ring_allreduce","aleph"], fidelity=["modelled","emulated"],
  params={"gradient_gbit": 4.2}, quick={"setup": ["paper"]}, full={"setup": ["paper"]}, est=(2, 120),
  metrics=[M("comm_time","s","lower")],
  paper=("Table 1", None, [V("ps","comm_time",0.84),V("ring_allreduce","comm_time",0.63),V("aleph","comm_time",0.42)]),
  claims=[C("aleph-fastest","ALEPH's hierarchical aggregation is fastest (Table 1)","comm_time(aleph) == min(comm_time(*))"),
          C("equations","The modelled times match the paper's arithmetic","within(comm_time(aleph), paper(comm_time(aleph)), 1%)",["modelled"])],
  figures=[F("table1","Table 1","bars","comm_time",series=["system"])])

X(id="aleph-table2", artifact="Table 2", title="CPU cores needed to aggregate at 5 and 10 Gbps: XDP vs TCP",
  description="CPU cores the aggregation service needs at 5 and 10 Gbps in the kernel (XDP) and with a TCP user-space service.",
  systems=["xdp","tcp"], fidelity=["hardware","emulated"],
  params={}, quick={"rate_gbps": [5]}, full={"rate_gbps": [5, 10]}, est=(60, 600),
  metrics=[M("cores","cores","lower")],
  paper=("Table 2", None, [V("xdp","cores",0.3,rate_gbps=5),V("xdp","cores",0.6,rate_gbps=10),V("tcp","cores",3.5,rate_gbps=5),V("tcp","cores",7.5,rate_gbps=10)]),
  claims=[C("xdp-cheaper","XDP needs an order of magnitude fewer cores than TCP (Table 2)","cores(tcp) >= 5 * cores(xdp)",tolerance="'order of magnitude' read as at least 5x")],
  figures=[F("table2","Table 2","bars","cores",x="rate_gbps",series=["system"])])

X(id="aleph-fig5", artifact="Fig. 5", title="Aggregation throughput vs CPU cores: XDP-driver, XDP-generic, TCP",
  description="Aggregation throughput against the number of CPU cores for XDP in driver mode, XDP in generic mode and TCP.",
  systems=["xdp_driver","xdp_generic","tcp"], fidelity=["hardware","emulated"],
  params={}, quick={"cores": [1]}, full={"cores": [1,2,4,8]}, est=(60, 900),
  metrics=[M("throughput","Gbps","higher")],
  paper=("Fig. 5", "from the text", [V("xdp_driver","throughput",17,cores=1),V("tcp","throughput",1.6,cores=1),V("xdp_driver","throughput",80,cores=8),V("xdp_generic","throughput",60,cores=8),V("tcp","throughput",10,cores=8)]),
  claims=[C("xdp-faster","XDP aggregates much faster than TCP per core (Fig. 5)","throughput(xdp_driver) > 5 * throughput(tcp)")],
  figures=[F("fig5","Fig. 5: throughput vs cores","lines","throughput",x="cores",series=["system"])])

X(id="aleph-fig6", artifact="Fig. 6", title="Packet loss vs CPU usage",
  description="Packet loss of the XDP aggregation service against CPU usage.",
  systems=["xdp_driver","xdp_generic"], fidelity=["emulated"],
  params={}, quick={"cpu_pct": [90, 95]}, full={"cpu_pct": [50,70,80,90,95,99]}, est=(60, 900),
  metrics=[M("loss","%","lower")],
  paper=("Fig. 6", "from the text", [V("xdp_driver","loss",0.1,cpu_pct=95),V("xdp_generic","loss",0.2,cpu_pct=95)]),
  claims=[C("low-loss","Loss stays at or below 1% above 90% CPU (Sec. 4)","loss(*) <= 1 where cpu_pct >= 90".replace("loss(*)","max(loss(*))"))],
  figures=[F("fig6","Fig. 6: loss vs CPU","lines","loss",x="cpu_pct",series=["system"])])

X(id="aleph-fig7", artifact="Fig. 7", title="Communication time per 128-gradient packet vs packet rate",
  description="Mean communication time of a 128-gradient packet against the packet rate for XDP and TCP.",
  systems=["xdp","tcp"], fidelity=["emulated"],
  params={}, quick={"pps": [1, 100000]}, full={"pps": [1, 1000, 100000, 1000000, 1500000]}, est=(60, 900),
  metrics=[M("comm_time","us","lower")],
  paper=("Fig. 7", "from the text", [V("xdp","comm_time",233,pps=1),V("xdp","comm_time",42,pps=1500000),V("tcp","comm_time",569,pps=1),V("tcp","comm_time",94,pps=1500000)]),
  claims=[C("xdp-lower","XDP's communication time is below TCP's at every rate (Fig. 7)","comm_time(xdp) < comm_time(tcp)")],
  figures=[F("fig7","Fig. 7: time per packet","lines","comm_time",x="pps",series=["system"],log_x=True)])

X(id="aleph-fig8", artifact="Fig. 8", title="Multicast CPU cost vs throughput",
  description="CPU cost of multicasting the aggregated gradient with XDP redirect against TCP.",
  systems=["xdp","tcp"], fidelity=["emulated"],
  params={}, quick={"throughput_gbps": [10]}, full={"throughput_gbps": [10,20,40,60,80]}, est=(60, 900),
  metrics=[M("cpu","%","lower")],
  paper=("Fig. 8", "from the text: TCP reaches 40 Gbps at about 100% CPU, XDP 80 Gbps", [V("tcp","cpu",100,throughput_gbps=40)]),
  claims=[C("xdp-cheaper","XDP multicast costs less CPU than TCP at the same throughput (Fig. 8)","cpu(xdp) < cpu(tcp)")],
  figures=[F("fig8","Fig. 8: multicast CPU","lines","cpu",x="throughput_gbps",series=["system"])])

vals = [V("aleph","worker_bw",4.2,model="resnet50",role="worker_10g")]
X(id="aleph-fig9", artifact="Fig. 9", title="Per-machine bandwidth, 8 workers (1x30, 2x20, 5x10 Gbps) + PS 40 Gbps",
  description="Bandwidth used per machine by BytePS, Horovod and ALEPH for ResNet50, VGG19 and BERT with heterogeneous worker links; emulated with rate-limited namespaces (rates scaled) and modelled.",
  systems=["byteps","horovod","aleph"], fidelity=["hardware","emulated","modelled"],
  params={}, quick={"model": ["resnet50"]}, full={"model": ["resnet50","vgg19","bert"]}, est=(60, 1800),
  metrics=[M("utilisation_gain","%","higher","bandwidth utilisation gain of ALEPH over the baseline")],
  paper=("Fig. 9", "utilisation gains from the text (over BytePS / over Horovod)", [V("byteps","utilisation_gain",136,model="resnet50"),V("horovod","utilisation_gain",36,model="resnet50"),V("byteps","utilisation_gain",163,model="vgg19"),V("horovod","utilisation_gain",36,model="vgg19"),V("byteps","utilisation_gain",141,model="bert"),V("horovod","utilisation_gain",19,model="bert")]),
  claims=[C("aleph-uses-more","ALEPH uses the heterogeneous bandwidth better than BytePS and Horovod (Fig. 9)","utilisation_gain(byteps) > 0 and utilisation_gain(horovod) > 0")],
  figures=[F("fig9","Fig. 9: utilisation gain","bars","utilisation_gain",x="model",series=["system"])])

X(id="aleph-fig10", artifact="Fig. 10", title="CPU usage per machine",
  description="CPU cores used per machine by ALEPH's aggregators and by BytePS.",
  systems=["byteps","aleph"], fidelity=["hardware","emulated"],
  params={}, quick={"model": ["resnet50"]}, full={"model": ["resnet50","vgg19","bert"]}, est=(60, 1800),
  metrics=[M("cores","cores","lower")],
  paper=("Fig. 10", "Agg2 vs BytePS from the text", [V("aleph","cores",6.8,model="resnet50"),V("aleph","cores",8.5,model="vgg19"),V("aleph","cores",7.8,model="bert"),V("byteps","cores",3.9,model="resnet50"),V("byteps","cores",4.1,model="vgg19"),V("byteps","cores",4.5,model="bert")]),
  claims=[C("aleph-costs-cpu","ALEPH's aggregators use more CPU than BytePS's servers (Fig. 10)","cores(aleph) > cores(byteps)")],
  figures=[F("fig10","Fig. 10: CPU per machine","bars","cores",x="model",series=["system"])])

X(id="aleph-fig11", artifact="Fig. 11", title="Communication time per iteration",
  description="Communication time per iteration of BytePS, Horovod and ALEPH for ResNet50, VGG19 and BERT.",
  systems=["byteps","horovod","aleph"], fidelity=["hardware","emulated","modelled"],
  params={}, quick={"model": ["resnet50"]}, full={"model": ["resnet50","vgg19","bert"]}, est=(60, 1800),
  metrics=[M("comm_time","s","lower")],
  paper=("Fig. 11", None, [V("byteps","comm_time",0.17,model="resnet50"),V("horovod","comm_time",0.15,model="resnet50"),V("aleph","comm_time",0.12,model="resnet50"),V("byteps","comm_time",0.84,model="vgg19"),V("horovod","comm_time",0.78,model="vgg19"),V("aleph","comm_time",0.58,model="vgg19"),V("byteps","comm_time",0.73,model="bert"),V("horovod","comm_time",0.65,model="bert"),V("aleph","comm_time",0.51,model="bert")]),
  claims=[C("aleph-fastest","ALEPH has the shortest communication time per iteration (Fig. 11)","comm_time(aleph) == min(comm_time(*))")],
  figures=[F("fig11","Fig. 11: communication time","bars","comm_time",x="model",series=["system"])])

X(id="aleph-fig12", artifact="Fig. 12", title="Accuracy vs time",
  description="Top-1 accuracy against training time for ResNet50 under the three systems, at the same wall-clock budget.",
  systems=["byteps","horovod","aleph"], fidelity=["hardware","modelled"],
  params={"model": "resnet50"}, quick={"budget": ["paper"]}, full={"budget": ["paper"]}, est=(5, 60),
  metrics=[M("accuracy","%","higher")],
  paper=("Fig. 12", "from the text", [V("aleph","accuracy",80.4),V("byteps","accuracy",69.8),V("horovod","accuracy",78.1)]),
  claims=[C("aleph-best","ALEPH reaches the highest accuracy in the same time (Fig. 12)","accuracy(aleph) == max(accuracy(*))")],
  figures=[F("fig12","Fig. 12: accuracy","bars","accuracy",series=["system"])])

X(id="aleph-fig13", artifact="Fig. 13", title="Simulation: 100 workers + 10 PS, worker bandwidth ~ N(5 Gbps, sigma)",
  description="Bandwidth used by workers and parameter servers as the spread sigma of worker bandwidth grows; flow-level simulation with M-WCHA clustering.",
  systems=["byteps","horovod","aleph"], fidelity=["simulated","functional"],
  params={"workers": 100, "ps": 10}, quick={"sigma": [0.1, 0.3]}, full={"sigma": [0.0,0.1,0.2,0.3,0.4,0.5]}, est=(30, 600),
  metrics=[M("worker_bw","Gbps","higher"),M("ps_bw","Gbps","lower")],
  paper=("Fig. 13", "from the text at sigma=0.3", [V("aleph","worker_bw",188,sigma=0.3),V("byteps","worker_bw",100,sigma=0.3),V("horovod","worker_bw",100,sigma=0.3),V("aleph","ps_bw",12,sigma=0.3),V("byteps","ps_bw",100,sigma=0.3)]),
  claims=[C("aleph-uses-workers","ALEPH uses more worker bandwidth and less PS bandwidth (Fig. 13)","worker_bw(aleph) > worker_bw(byteps) and ps_bw(aleph) < ps_bw(byteps)")],
  figures=[F("fig13","Fig. 13: bandwidth vs sigma","lines","worker_bw",x="sigma",series=["system"])])

X(id="aleph-fig14", artifact="Fig. 14", title="Communication overhead vs workers: fat-tree and leaf-spine",
  description="Total traffic against the number of workers in a fat-tree (16 core, 32 aggregation, 32 edge, 320 servers) and a leaf-spine (30/30/300).",
  systems=["byteps","horovod","aleph"], fidelity=["simulated"],
  params={}, quick={"topology": ["fat_tree"], "workers": [50]}, full={"topology": ["fat_tree","leaf_spine"], "workers": [50,100,150,200,250,300]}, est=(60, 3600),
  metrics=[M("overhead","GB","lower")],
  paper=("Fig. 14", "150 workers, fat-tree, from the text (order as in EXPERIMENTS.md: ALEPH / BytePS / Horovod)", [V("aleph","overhead",51.7,topology="fat_tree",workers=150),V("byteps","overhead",85.3,topology="fat_tree",workers=150),V("horovod","overhead",64.8,topology="fat_tree",workers=150)]),
  claims=[C("aleph-least","ALEPH has the least communication overhead (Fig. 14)","overhead(aleph) == min(overhead(*))")],
  figures=[F("fig14","Fig. 14: overhead vs workers","lines","overhead",x="workers",series=["system","topology"])])

X(id="aleph-fig15-16", artifact="Figs. 15-16", title="Gradient hops vs workers and vs sigma",
  description="Average hops a gradient travels against the number of workers and against sigma.",
  systems=["byteps","horovod","aleph"], fidelity=["simulated","functional"],
  params={}, quick={"sigma": [0.3], "workers": [10]}, full={"sigma": [0.1,0.3,0.5], "workers": [10,50,100]}, est=(30, 900),
  metrics=[M("hops","1","lower")],
  paper=("Figs. 15-16", "sigma=0.3, 10 workers, from the text", [V("aleph","hops",1.1,sigma=0.3,workers=10),V("byteps","hops",3,sigma=0.3,workers=10),V("horovod","hops",9,sigma=0.3,workers=10)]),
  claims=[C("aleph-fewest","ALEPH's gradients travel the fewest hops (Figs. 15-16)","hops(aleph) == min(hops(*))")],
  figures=[F("fig15","Fig. 15: hops vs workers","lines","hops",x="workers",series=["system"])])

# ---------------------------------------------------------------- P4SGD
X(id="p4sgd-fig8", artifact="Fig. 8", title="All-reduce latency of 8 x 32-bit elements across 8 workers",
  description="Latency distribution of an all-reduce of eight 32-bit elements across 8 workers for P4SGD's latency-centric in-switch aggregation, CPUSync, GPUSync and SwitchML.",
  systems=["p4sgd","cpusync","gpusync","switchml"], fidelity=["hardware","emulated","simulated"],
  params={"workers": 8, "elements": 8}, quick={"trial": [1]}, full={"trial": [1]}, est=(30, 300),
  metrics=[M("latency","us","lower")],
  paper=("Fig. 8", "mean from the text", [V("p4sgd","latency",1.2)]),
  claims=[C("p4sgd-lowest","P4SGD's latency is an order of magnitude below CPUSync and GPUSync (Sec. 5.2)","latency(p4sgd) * 10 <= min(latency(cpusync), latency(gpusync))"),
          C("switchml-highest","SwitchML's latency is the highest (Fig. 8)","latency(switchml) == max(latency(*))")],
  figures=[F("fig8","Fig. 8: all-reduce latency","bars","latency",series=["system"],log_y=True)])

X(id="p4sgd-fig9", artifact="Fig. 9", title="Time per epoch, data- vs model-parallel, 4 workers",
  description="Epoch time of data- and model-parallel GLM training with 4 workers over mini-batch sizes 16..1024.",
  systems=["p4sgd_dp","p4sgd_mp"], fidelity=["hardware","emulated","modelled"],
  params={"workers": 4}, quick={"dataset": ["rcv1_small"], "batch": [16, 256]}, full={"dataset": ["gisette","real_sim","rcv1","amazon_fashion","avazu"], "batch": [16,64,256,1024]}, est=(60, 7200),
  metrics=[M("epoch_time","s","lower")],
  paper=("Fig. 9", "no printed values", []),
  claims=[C("mp-faster","Model parallelism is faster than data parallelism (Fig. 9)","epoch_time(p4sgd_mp) < epoch_time(p4sgd_dp)")],
  figures=[F("fig9","Fig. 9: epoch time","lines","epoch_time",x="batch",series=["system","dataset"],log_x=True)])

X(id="p4sgd-fig10", artifact="Fig. 10", title="Speedup vs mini-batch size (over B=16)",
  description="Speedup of P4SGD over mini-batch size 16 as the mini-batch grows.",
  systems=["p4sgd"], fidelity=["emulated","modelled"],
  params={"workers": 4}, quick={"batch": [16, 64, 256]}, full={"batch": [16,32,64,128,256,512,1024]}, est=(60, 3600),
  metrics=[M("speedup","x","higher")],
  paper=("Fig. 10", "no printed values", []),
  claims=[C("larger-batch-faster","Larger mini-batches give higher speedup (Sec. 5.3)","increasing(speedup(p4sgd), batch)")],
  figures=[F("fig10","Fig. 10: speedup vs batch","lines","speedup",x="batch",log_x=True)])

X(id="p4sgd-fig11", artifact="Fig. 11", title="Scale-up with engines 1..8",
  description="Throughput with 1..8 MLWeaving engines per FPGA.",
  systems=["p4sgd"], fidelity=["modelled"],
  params={}, quick={"engines": [1, 2, 4, 8]}, full={"engines": [1,2,3,4,5,6,7,8]}, est=(5, 30),
  metrics=[M("throughput","samples/s","higher")],
  paper=("Fig. 11", "no printed values", []),
  claims=[C("scales-up","More engines give higher throughput (Sec. 5.3)","increasing(throughput(p4sgd), engines)")],
  figures=[F("fig11","Fig. 11: scale-up","lines","throughput",x="engines")])

X(id="p4sgd-fig12", artifact="Fig. 12", title="Scale-out with workers 1..8",
  description="Speedup with 1..8 workers.",
  systems=["p4sgd"], fidelity=["emulated","simulated","modelled"],
  params={}, quick={"workers": [1, 2, 4]}, full={"workers": [1,2,4,8]}, est=(60, 3600),
  metrics=[M("speedup","x","higher")],
  paper=("Fig. 12", "no printed values: near-linear at 1M features", []),
  claims=[C("near-linear","Scale-out is near linear at 1M features (Sec. 5.4)","speedup(p4sgd) >= 0.8 * workers",tolerance="'near-linear' read as at least 80% efficiency")],
  figures=[F("fig12","Fig. 12: scale-out","lines","speedup",x="workers")])

X(id="p4sgd-fig13", artifact="Fig. 13", title="Epoch time vs workers and batch: P4SGD, SwitchML, CPUSync, GPUSync",
  description="Epoch time of the four synchronisation methods against workers and mini-batch size.",
  systems=["p4sgd","switchml","cpusync","gpusync"], fidelity=["emulated","modelled"],
  params={}, quick={"workers": [4], "batch": [64]}, full={"workers": [2,4,8], "batch": [16,64,256]}, est=(60, 3600),
  metrics=[M("epoch_time","s","lower")],
  paper=("Fig. 13", "no printed values", []),
  claims=[C("p4sgd-fastest","P4SGD is the fastest (Fig. 13)","epoch_time(p4sgd) == min(epoch_time(*))"),
          C("switchml-slower-than-cpu","SwitchML is slower than CPUSync (Fig. 13)","epoch_time(switchml) > epoch_time(cpusync)")],
  figures=[F("fig13","Fig. 13: epoch time","lines","epoch_time",x="workers",series=["system","batch"])])

X(id="p4sgd-fig14", artifact="Fig. 14", title="Loss vs epochs, batch 64",
  description="Training loss over epochs for the synchronous methods (real GLM training on the CPU).",
  systems=["p4sgd","cpusync","gpusync"], fidelity=["functional"],
  params={"batch": 64}, quick={"dataset": ["rcv1_small"], "epoch": [1, 5]}, full={"dataset": ["gisette","rcv1","avazu"], "epoch": [1,2,5,10,20]}, est=(60, 3600),
  metrics=[M("loss","1","lower")],
  paper=("Fig. 14", "no printed values: all synchronous methods converge alike", []),
  claims=[C("same-convergence","All synchronous methods converge alike (Fig. 14)","within(loss(p4sgd), loss(cpusync), 1%)")],
  figures=[F("fig14","Fig. 14: loss vs epochs","lines","loss",x="epoch",series=["system","dataset"])])

X(id="p4sgd-fig15", artifact="Fig. 15", title="Loss vs time",
  description="Time to reach the same loss for P4SGD, GPUSync and CPUSync.",
  systems=["p4sgd","gpusync","cpusync"], fidelity=["hardware","emulated","modelled"],
  params={}, quick={"dataset": ["rcv1_small"]}, full={"dataset": ["gisette","real_sim","rcv1","amazon_fashion","avazu"]}, est=(60, 7200),
  metrics=[M("time_to_loss","s","lower")],
  paper=("Fig. 15", "up to 6.5x faster than GPUSync and 67x than CPUSync (text)", []),
  claims=[C("p4sgd-fastest","P4SGD reaches the loss fastest (Fig. 15)","time_to_loss(p4sgd) == min(time_to_loss(*))")],
  figures=[F("fig15","Fig. 15: time to loss","bars","time_to_loss",x="dataset",series=["system"],log_y=True)])

X(id="p4sgd-table4", artifact="Table IV", title="Energy per training run",
  description="Energy of a training run from power readings (hardware) or a power model (modelled).",
  systems=["p4sgd","gpusync","cpusync"], fidelity=["hardware","modelled"],
  params={}, quick={"dataset": ["rcv1"]}, full={"dataset": ["rcv1","avazu"]}, est=(5, 60),
  metrics=[M("energy","J","lower")],
  paper=("Table IV", None, [V("p4sgd","energy",143,dataset="rcv1"),V("gpusync","energy",1619,dataset="rcv1"),V("cpusync","energy",7142,dataset="rcv1"),V("p4sgd","energy",2175,dataset="avazu"),V("gpusync","energy",10028,dataset="avazu"),V("cpusync","energy",63612,dataset="avazu")]),
  claims=[C("p4sgd-least-energy","P4SGD uses the least energy (Table IV)","energy(p4sgd) == min(energy(*))")],
  figures=[F("table4","Table IV: energy","bars","energy",x="dataset",series=["system"],log_y=True)])

# ---------------------------------------------------------------- LuWu
X(id="luwu-fig2", artifact="Fig. 2", title="ZeRO-Infinity iteration breakdown, GPT-3 175B, 8 x A100-40GB, 100 Gbps",
  description="Breakdown of a ZeRO-Infinity iteration: GPU compute utilisation and the optimizer step's share.",
  systems=["zero_infinity"], fidelity=["hardware","modelled"],
  params={"model": "gpt3_175b", "gpus": 8}, quick={"micro_batch": [16]}, full={"micro_batch": [4,8,16,32]}, est=(5, 30),
  metrics=[M("gpu_utilisation","%","higher"),M("optimizer_share","%","lower")],
  paper=("Fig. 2", "from the text", [V("zero_infinity","gpu_utilisation",23),V("zero_infinity","optimizer_share",37)]),
  claims=[C("low-utilisation","ZeRO-Infinity keeps GPU compute utilisation low (23%) (Sec. 2)","gpu_utilisation(zero_infinity) < 50")],
  figures=[F("fig2","Fig. 2: breakdown","bars","optimizer_share",x="micro_batch")])

X(id="luwu-fig3", artifact="Fig. 3", title="Serialised communication under compute: ZeRO-Infinity vs LuWu",
  description="Share of communication not overlapped with compute.",
  systems=["zero_infinity","luwu"], fidelity=["hardware","modelled"],
  params={}, quick={"micro_batch": [16]}, full={"micro_batch": [4,8,16,32]}, est=(5, 30),
  metrics=[M("serialised_comm","%","lower"),M("comm_time_reduction","%","higher")],
  paper=("Fig. 3", "from the text", [V("zero_infinity","serialised_comm",30,micro_batch=16),V("luwu","comm_time_reduction",42)]),
  claims=[C("luwu-overlaps","LuWu overlaps communication fully (Fig. 3)","serialised_comm(luwu) < serialised_comm(zero_infinity)")],
  figures=[F("fig3","Fig. 3","bars","serialised_comm",x="micro_batch",series=["system"])])

X(id="luwu-fig10", artifact="Fig. 10", title="Maximum trainable model size vs workers",
  description="Largest model each system can train against the number of workers, from memory accounting.",
  systems=["luwu","zero_infinity","switchml"], fidelity=["functional"],
  params={}, quick={"workers": [8]}, full={"workers": [1,2,4,8]}, est=(2, 10),
  metrics=[M("max_model_b","B params","higher")],
  paper=("Fig. 10", "from the text at 8 workers", [V("luwu","max_model_b",1000,workers=8),V("zero_infinity","max_model_b",175,workers=8),V("switchml","max_model_b",1.3,workers=8)]),
  claims=[C("luwu-largest","LuWu trains the largest models (Fig. 10)","max_model_b(luwu) == max(max_model_b(*))")],
  figures=[F("fig10","Fig. 10: max model size","lines","max_model_b",x="workers",series=["system"],log_y=True)])

X(id="luwu-fig11", artifact="Fig. 11", title="Per-GPU TFLOPS vs micro-batch: OPT-175B, OPT-1.3B",
  description="Per-GPU TFLOPS of LuWu against ZeRO-Infinity, ZeRO-3 and SwitchML.",
  systems=["luwu","zero_infinity","zero3","switchml"], fidelity=["hardware","modelled"],
  params={}, quick={"model": ["opt_175b"], "micro_batch": [16]}, full={"model": ["opt_175b","opt_1.3b"], "micro_batch": [4,8,16,32]}, est=(5, 60),
  metrics=[M("tflops","TFLOPS","higher")],
  paper=("Fig. 11", "from the text", [V("luwu","tflops",183,model="opt_175b"),V("luwu","tflops",145,model="opt_1.3b")]),
  claims=[C("luwu-fastest","LuWu has the highest per-GPU TFLOPS (Fig. 11: 3.98x ZeRO-Infinity on OPT-175B)","tflops(luwu) == max(tflops(*))")],
  figures=[F("fig11","Fig. 11: TFLOPS","lines","tflops",x="micro_batch",series=["system","model"])])

X(id="luwu-fig12", artifact="Fig. 12", title="TFLOPS vs model size 13B..1T",
  description="Per-GPU TFLOPS against OPT model size.",
  systems=["luwu","zero_infinity","zero3"], fidelity=["hardware","modelled"],
  params={}, quick={"model": ["opt_13b","opt_175b"]}, full={"model": ["opt_13b","opt_30b","opt_66b","opt_175b","opt_276b","opt_505b","opt_1t"]}, est=(5, 60),
  metrics=[M("tflops","TFLOPS","higher")],
  paper=("Fig. 12", "from the text", [V("luwu","tflops",184,model="opt_276b")]),
  claims=[C("luwu-2x-zero3","LuWu reaches at least 2.04x ZeRO-3 (Sec. 5)","tflops(luwu) >= 2.04 * tflops(zero3)"),
          C("luwu-2x-infinity","LuWu reaches at least 2.34x ZeRO-Infinity (Sec. 5)","tflops(luwu) >= 2.34 * tflops(zero_infinity)")],
  figures=[F("fig12","Fig. 12: TFLOPS vs size","bars","tflops",x="model",series=["system"])])

X(id="luwu-fig13", artifact="Fig. 13", title="vs ZeRO-Infinity + SHARP, OPT-30B, 4 workers",
  description="LuWu against ZeRO-Infinity with SHARP in-network reduction.",
  systems=["luwu","zero_infinity_sharp"], fidelity=["hardware","modelled"],
  params={"model": "opt_30b", "workers": 4}, quick={"micro_batch": [16]}, full={"micro_batch": [4,8,16,32]}, est=(5, 30),
  metrics=[M("speedup","x","higher","LuWu over ZeRO-Infinity + SHARP")],
  paper=("Fig. 13", "range from the text", [V("luwu","speedup",2.38)]),
  claims=[C("luwu-beats-sharp","LuWu is 2.38-3.35x ZeRO-Infinity + SHARP (Fig. 13)","speedup(luwu) >= 2.38")],
  figures=[F("fig13","Fig. 13","bars","speedup",x="micro_batch")])

X(id="luwu-fig14", artifact="Fig. 14", title="Scale-out 1..8 workers, OPT-30B",
  description="Throughput against workers at micro-batch 8 and 32.",
  systems=["luwu","zero_infinity"], fidelity=["hardware","modelled"],
  params={"model": "opt_30b"}, quick={"workers": [1, 8], "micro_batch": [8]}, full={"workers": [1,2,4,8], "micro_batch": [8, 32]}, est=(5, 30),
  metrics=[M("throughput","samples/s","higher")],
  paper=("Fig. 14", "no printed throughput; 1.21x / 1.94x over ZeRO-Infinity's upper bound in the text", []),
  claims=[C("linear","LuWu scales linearly (Fig. 14)","increasing(throughput(luwu), workers)")],
  figures=[F("fig14","Fig. 14: scale-out","lines","throughput",x="workers",series=["system","micro_batch"])])

X(id="luwu-fig15", artifact="Fig. 15", title="Iteration time vs SSD count 4/8/12, OPT-175B",
  description="Iteration time with 4, 8 and 12 SSDs; emulated with the out-of-core optimizer on this host's storage.",
  systems=["luwu"], fidelity=["hardware","modelled","emulated"],
  params={"model": "opt_175b"}, quick={"ssds": [4, 12], "micro_batch": [16]}, full={"ssds": [4, 8, 12], "micro_batch": [8, 16, 32]}, est=(10, 600),
  metrics=[M("iteration_time","s","lower")],
  paper=("Fig. 15", "no printed values: SSD-bound at 4 and 8, compute-bound at 12 for micro-batch > 16", []),
  claims=[C("more-ssds-faster","More SSDs shorten the iteration while SSD-bound (Fig. 15)","decreasing(iteration_time(luwu), ssds)")],
  figures=[F("fig15","Fig. 15: iteration time vs SSDs","lines","iteration_time",x="ssds",series=["micro_batch"])])

X(id="luwu-fig16", artifact="Fig. 16", title="Convergence, LuWu vs ZeRO-Infinity",
  description="Loss curves of real small-model training with in-network Adam against local Adam.",
  systems=["luwu","zero_infinity"], fidelity=["hardware","functional"],
  params={}, quick={"step": [50, 100]}, full={"step": [100, 500, 1000, 2000]}, est=(60, 3600),
  metrics=[M("loss","1","lower")],
  paper=("Fig. 16", "no printed values: overlapping loss curves", []),
  claims=[C("same-loss","LuWu's loss curve overlaps ZeRO-Infinity's (Fig. 16)","within(loss(luwu), loss(zero_infinity), 1%)")],
  figures=[F("fig16","Fig. 16: convergence","lines","loss",x="step",series=["system"])])

X(id="luwu-fig17", artifact="Fig. 17", title="vs ZeRO-Offload on one 8-GPU NVLink server, OPT-13B",
  description="LuWu against ZeRO-Offload on a single NVLink server.",
  systems=["luwu","zero_offload"], fidelity=["hardware","modelled"],
  params={"model": "opt_13b"}, quick={"micro_batch": [16]}, full={"micro_batch": [4,8,16,32]}, est=(5, 30),
  metrics=[M("tflops","TFLOPS","higher")],
  paper=("Fig. 17", "see the paper: no values quoted in the catalogue", []),
  claims=[C("luwu-competitive","LuWu is at least as fast as ZeRO-Offload on one server (Fig. 17)","tflops(luwu) >= tflops(zero_offload)")],
  figures=[F("fig17","Fig. 17","bars","tflops",x="micro_batch",series=["system"])])

X(id="luwu-pushpull", artifact="Sec. 3.2 (beyond the paper)", title="Push/pull primitives: throughput, loss recovery, fairness",
  description="LuWu's many-to-one push/pull primitives with credit and heartbeat flow control under loss: throughput, recovery from Ack stalls, fairness across workers, and no RX buffer overflow.",
  systems=["luwu"], fidelity=["emulated","simulated"],
  params={"workers": 8}, quick={"loss": [0, 0.001]}, full={"loss": [0, 0.0001, 0.001, 0.01]}, est=(60, 900),
  metrics=[M("throughput","Gbps","higher"),M("lost_updates","1","lower"),M("rx_overflows","1","lower")],
  paper=("Sec. 3.2", "no values: lossless delivery and resend on Ack stall", []),
  claims=[C("lossless","No update is lost and no RX buffer overflows (Sec. 3.2.3)","lost_updates(luwu) == 0 and rx_overflows(luwu) == 0")],
  figures=[F("pushpull","Throughput vs loss","lines","throughput",x="loss")])

def dump(e):
    import yaml  # noqa
    pid = e["id"].split("-")[0]
    quick, full = e["quick"], e["full"]
    reps = e.get("reps", (1, 3))
    spec = {
        "id": e["id"], "paper_id": pid, "title": e["title"], "citation": CIT[pid], "artifact": e["artifact"],
        "status": "planned", "description": e["description"] + " Status: planned: the systems this experiment needs are not built yet.",
        "systems": e["systems"], "fidelity": e["fidelity"], "parameters": e.get("params", {}),
        "profiles": {
            "quick": {"repetitions": reps[0], "warmup": 0, "estimated_seconds": e["est"][0], "grid": [quick]},
            "full": {"repetitions": reps[1], "warmup": 1, "estimated_seconds": e["est"][1], "grid": [full]},
        },
        "metrics": e["metrics"],
        "paper": {"source": e["paper"][0], **({"note": e["paper"][1]} if e["paper"][1] else {}), "values": e["paper"][2]},
        "claims": e["claims"], "figures": e["figures"],
    }
    return spec

if __name__ == "__main__":
    import yaml
    root = os.path.join(os.path.dirname(__file__), "..")
    force = "--force" in sys.argv
    for e in E:
        pid = e["id"].split("-")[0]
        name = e["id"][len(pid) + 1:]
        path = os.path.join(root, pid, name + ".yaml")
        if os.path.exists(path) and not force:
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("# Generated by experiments/tools/gen_planned.py as a planned spec; maintained by hand from here.\n")
            yaml.safe_dump(dump(e), f, sort_keys=False, width=110, allow_unicode=True)
        print("wrote", path)
