"""Peak activation memory of two dense transformer layers in eager PyTorch at T tokens (device script;
output in benchmarks/results/forward_memory_h100.json). An upper bound on vLLM's compiled forward:
eager keeps SiLU(gate) beside the product and expands the GQA K/V heads, which vLLM's fused
``silu_and_mul`` and attention kernels do not.
"""
import json,torch,torch.nn.functional as F
def layer(x,W,h,nq,nk,hd,f):
 r=x;x=F.rms_norm(x,(h,));qkv=x@W[0].t();q,k,v=qkv.split([nq*hd,nk*hd,nk*hd],-1);T=x.shape[0]
 q=q.view(T,nq,hd).transpose(0,1);k=k.view(T,nk,hd).transpose(0,1).repeat_interleave(nq//nk,0);v=v.view(T,nk,hd).transpose(0,1).repeat_interleave(nq//nk,0)
 o=F.scaled_dot_product_attention(q.unsqueeze(0),k.unsqueeze(0),v.unsqueeze(0),is_causal=True)[0].transpose(0,1).reshape(T,nq*hd)
 x=r+o@W[1].t();r=x;x=F.rms_norm(x,(h,));gu=x@W[2].t();g,u=gu.chunk(2,-1);a=F.silu(g)*u;return r+a@W[3].t()
def ms(T,h,nq,nk,hd,f):
 d="cuda";b=torch.bfloat16;W=[torch.randn(o,i,device=d,dtype=b)*.02 for o,i in [((nq+2*nk)*hd,h),(h,nq*hd),(2*f,h),(h,f)]]
 x=torch.randn(T,h,device=d,dtype=b);torch.cuda.synchronize();torch.cuda.empty_cache();b0=torch.cuda.memory_allocated();torch.cuda.reset_peak_memory_stats()
 with torch.inference_mode():
  y=layer(x,W,h,nq,nk,hd,f);y=layer(y,W,h,nq,nk,hd,f)
 torch.cuda.synchronize();pk=torch.cuda.max_memory_allocated()-b0;del W,x,y;torch.cuda.empty_cache()
 return dict(T=T,h=h,f=f,nq=nq,nk=nk,peak=int(pk),per_token=pk/T,per_token_over_2B=pk/T/2)
R=[ms(8192,4096,32,8,128,14336),ms(2048,4096,32,8,128,14336),ms(8192,8192,16,2,128,7168),ms(8192,2880,64,8,64,2880)]
print(json.dumps(R,indent=1))
