#!/usr/bin/env python3
"""CPU emulation of scripts/mma_sync_rate.cu's one-warp attention step, for a machine without a GPU.

It applies the PTX ISA's fragment rules for ldmatrix (.x4, with and without .trans) and
mma.sync.m16n8k16 (.row.col, bf16 in, f32 accumulate) to the probe's own address arithmetic
(the ring's swizzled layout, `swizzled()`) and lane-to-matrix mapping, then compares one step's
O / l with NumPy. It checks the mappings a 16-row decode consumer would use before any GPU time
is spent on them; a swapped mapping fails it (e.g. the K matrices' row and column halves
exchanged: error 5e-3 against the probe's tolerance, 1e-2 of max |O| plus 1e-4). Session 52: max error 1.8e-5 of max |O| 3.5e-3.

    python3 scripts/mma_sync_emulate.py
"""
import numpy as np
kKeys=kDim=128
def swz(rows,r,col): return (col//64)*rows*64 + r*64 + ((((col%64)//8) ^ (r%8))*8) + col%8
def bf16(x):
    x=np.asarray(x,dtype=np.float32); b=x.view(np.uint32); b=((b + 0x7fff + ((b>>16)&1)) & 0xffff0000).astype(np.uint32); return b.view(np.float32)
q_at=lambda r,c: 0.0625*((r*7+c*3)%11-5)
k_at=lambda k,d: 0.0625*((k*5+d*13)%9-4)
v_at=lambda k,d: 0.015625*((k*3+d)%23-11)
mem=np.zeros(2*kKeys*kDim+16*kDim,dtype=np.float32)
for key in range(kKeys):
    for d in range(kDim):
        mem[swz(kKeys,key,d)]=k_at(key,d); mem[kKeys*kDim+swz(kKeys,key,d)]=v_at(key,d)
        if key<16: mem[2*kKeys*kDim+swz(16,key,d)]=q_at(key,d)
mem=bf16(mem)
kb,vb,qb=0,kKeys*kDim,2*kKeys*kDim   # element bases
def ldsm(addr_of_lane, trans=False):
    # addr_of_lane(lane) -> element offset of that lane's row (8 elements); returns regs[lane][4] of (lo,hi)
    rows=[[mem[addr_of_lane(m*8+r)+j] for j in range(8)] for m in range(4) for r in range(8)]
    out=[]
    for t in range(32):
        regs=[]
        for m in range(4):
            M=rows[m*8:(m+1)*8]
            if not trans: regs.append((M[t//4][2*(t%4)], M[t//4][2*(t%4)+1]))
            else: regs.append((M[2*(t%4)][t//4], M[2*(t%4)+1][t//4]))
        out.append(regs)
    return out
def mma(C,A,B0,B1):
    # C[lane][4], A[lane][4] pairs, B0/B1[lane] pairs -> D
    Am=np.zeros((16,16)); Bm=np.zeros((16,8))
    for t in range(32):
        g,c=t//4,t%4
        Am[g,2*c:2*c+2]=A[t][0]; Am[g+8,2*c:2*c+2]=A[t][1]; Am[g,2*c+8:2*c+10]=A[t][2]; Am[g+8,2*c+8:2*c+10]=A[t][3]
        Bm[2*c:2*c+2,g]=B0[t]; Bm[2*c+8:2*c+10,g]=B1[t]
    D=Am@Bm
    out=[]
    for t in range(32):
        g,c=t//4,t%4
        out.append([C[t][0]+D[g,2*c],C[t][1]+D[g,2*c+1],C[t][2]+D[g+8,2*c],C[t][3]+D[g+8,2*c+1]])
    return out
mat=lambda l:l//8; r8=lambda l:l%8
q=[ldsm(lambda l,kd=kd: qb+swz(16,(mat(l)%2)*8+r8(l),kd*16+(mat(l)//2)*8)) for kd in range(8)]
s=[[[0.0]*4 for _ in range(32)] for _ in range(16)]
for kd in range(8):
    for n in range(0,16,2):
        b=ldsm(lambda l: kb+swz(kKeys,n*8+(mat(l)//2)*8+r8(l),kd*16+(mat(l)%2)*8))
        A=[q[kd][t] for t in range(32)]
        s[n]=mma(s[n],A,[b[t][0] for t in range(32)],[b[t][1] for t in range(32)])
        s[n+1]=mma(s[n+1],A,[b[t][2] for t in range(32)],[b[t][3] for t in range(32)])
# softmax per row half (rows g, g+8), max over 4 lanes
o=[[[0.0]*4 for _ in range(32)] for _ in range(16)]
mx=np.full((32,2),-1e30); l=np.zeros((32,2))
for t in range(32):
    for n in range(16):
        mx[t,0]=max(mx[t,0],s[n][t][0],s[n][t][1]); mx[t,1]=max(mx[t,1],s[n][t][2],s[n][t][3])
for t in range(32):
    base=t-t%4; mx[t]=mx[base:base+4].max(axis=0)
p=[[None]*4 for _ in range(8)]
P=[[[None]*4 for _ in range(32)] for _ in range(8)]
for n in range(16):
    for t in range(32):
        e=[2.0**(s[n][t][0]-mx[t,0]),2.0**(s[n][t][1]-mx[t,0]),2.0**(s[n][t][2]-mx[t,1]),2.0**(s[n][t][3]-mx[t,1])]
        l[t,0]+=e[0]+e[1]; l[t,1]+=e[2]+e[3]
        P[n//2][t][(n%2)*2]=tuple(bf16([e[0],e[1]])); P[n//2][t][(n%2)*2+1]=tuple(bf16([e[2],e[3]]))
for kk in range(8):
    A=[P[kk][t] for t in range(32)]
    for n in range(0,16,2):
        b=ldsm(lambda l_: vb+swz(kKeys,kk*16+(mat(l_)%2)*8+r8(l_),n*8+(mat(l_)//2)*8),trans=True)
        o[n]=mma(o[n],A,[b[t][0] for t in range(32)],[b[t][1] for t in range(32)])
        o[n+1]=mma(o[n+1],A,[b[t][2] for t in range(32)],[b[t][3] for t in range(32)])
lsum=l.copy()
for t in range(32):
    base=t-t%4; lsum[t]=l[base:base+4].sum(axis=0)
got=np.zeros((16,128))
for t in range(32):
    for h in range(2):
        r=t//4+8*h
        for n in range(16):
            got[r,n*8+(t%4)*2]=o[n][t][2*h]/lsum[t,h]; got[r,n*8+(t%4)*2+1]=o[n][t][2*h+1]/lsum[t,h]
Q=np.array([[q_at(r,c) for c in range(128)] for r in range(16)]); K=np.array([[k_at(k,d) for d in range(128)] for k in range(128)]); V=np.array([[v_at(k,d) for d in range(128)] for k in range(128)])
S=Q@K.T; Pm=2.0**(S-S.max(axis=1,keepdims=True)); ref=(Pm@V)/Pm.sum(axis=1,keepdims=True)
print('max err', np.abs(got-ref).max(), 'max |O|', np.abs(ref).max())
tol = 1e-2 * np.abs(ref).max() + 1e-4  # the probe's own tolerance
raise SystemExit(0 if np.abs(got - ref).max() <= tol else 1)
