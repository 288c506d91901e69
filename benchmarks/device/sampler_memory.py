"""Peak GPU memory of one sampling pass over R requests x V vocabulary entries (device script; run as
``python3 benchmarks/device/sampler_memory.py``, output in benchmarks/results/sampler_memory_h100.json).

Plain PyTorch ops in the order vLLM V1's profiling run drives its sampler
(``gpu_model_runner._dummy_sampler_run``: temperature 0.5, top-k = V - 1, top-p 0.9, no penalties, no
logprobs, the PyTorch-native top-k/top-p path): the LM head's BF16 logits, their FP32 copy, the
temperature, the sort of every row with its int64 indices, the top-k and top-p masks, the scatter
back, the softmax and the exponential-race sample. ``bytes_per_logit``: the peak allocated bytes
above what was allocated before the LM head ran, over R x V. ``non_torch_after_gemm``: what the
first cuBLAS GEMM adds outside PyTorch's allocator (workspace, handles). Compact on purpose: it was
sent to the device inline (2,000-character command limit).
"""
import json,torch
def sp(lb):
 r,v=lb.shape;d=lb.device;l=lb.float();g=l.argmax(-1);l.div_(torch.full((r,1),.5,device=d))
 k=torch.full((r,),v-1,device=d,dtype=torch.long);p=torch.full((r,1),.9,device=d)
 s,i=l.sort(-1);kth=s.gather(1,(v-k).unsqueeze(1));s.masked_fill_(s<kth,-float("inf"))
 ps=s.softmax(-1);torch.cumsum(ps,-1,out=ps);m=ps<=1-p;m[:,-1]=False;s.masked_fill_(m,-float("inf"));del ps,m
 l=s.scatter(-1,i,s);del s,i;pr=l.softmax(-1,dtype=torch.float32);q=torch.empty_like(pr).exponential_()
 o=pr.div_(q).argmax(-1);return torch.where(o>=0,o,g)
def ms(r,v,hd):
 h=torch.randn(r,hd,device="cuda",dtype=torch.bfloat16);w=torch.randn(v,hd,device="cuda",dtype=torch.bfloat16)*.02
 torch.cuda.synchronize();torch.cuda.empty_cache();b=torch.cuda.memory_allocated();torch.cuda.reset_peak_memory_stats()
 lg=h@w.t();o=sp(lg);torch.cuda.synchronize();pk=torch.cuda.max_memory_allocated()-b
 del lg,o,h,w;torch.cuda.empty_cache();return dict(requests=r,vocab=v,hidden=hd,peak_bytes=int(pk),bytes_per_logit=pk/(r*v))
torch.cuda.init();f0,t=torch.cuda.mem_get_info();r0=torch.cuda.memory_reserved()
a=torch.randn(4096,4096,device="cuda",dtype=torch.bfloat16);(a@a).sum().item();torch.cuda.synchronize()
f1,_=torch.cuda.mem_get_info();nt=(f0-f1)-(torch.cuda.memory_reserved()-r0);del a
S=[(1024,201088,2880),(512,201088,2880),(256,128256,4096),(1024,128256,4096),(256,32000,4096),(128,32000,4096),(1024,151936,2048),(256,151936,2048)]
print(json.dumps(dict(device=torch.cuda.get_device_name(),torch=torch.__version__,total=int(t),free_at_start=int(f0),non_torch_after_gemm=int(nt),rows=[ms(*x) for x in S]),indent=1))
