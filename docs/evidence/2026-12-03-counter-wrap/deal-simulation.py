import heapq
meas={("fused",1):48,("fused",2):63,("fused",4):73,("fused",8):133,("fused",16):187,("unfused",1):21,("unfused",2):29,("unfused",4):37,("unfused",8):79,("unfused",16):68}
def sim(places, budget=25, start=14):
    # places: list of lists of combos in run order
    t=start; free=budget; idx=[0]*len(places); busy={} ; waiting=[]  # (req_time, place)
    events=[]; end=[start]*len(places)
    for p in range(len(places)): waiting.append((start,p))
    running=[]  # (finish, place, W)
    now=start
    while True:
        # start waiting in FIFO order if tokens
        waiting.sort()
        started=True
        while started:
            started=False
            for i,(rq,p) in enumerate(waiting):
                c=places[p][idx[p]]; W=min(c[1],budget)
                if W<=free:
                    free-=W; heapq.heappush(running,(now+meas[c],p,W)); waiting.pop(i); started=True; break
                else:
                    break  # FIFO: head blocks
        if not running: break
        fin,p,W=heapq.heappop(running); now=fin; free+=W; idx[p]+=1
        if idx[p]<len(places[p]): waiting.append((now,p))
        else: end[p]=now
    return max(end), end
old=[[("unfused",1),("unfused",4),("unfused",8)],[("fused",1),("fused",4),("fused",8)],[("fused",2),("fused",16)],[("unfused",2),("unfused",16)]]
new=[[("fused",16),("unfused",16)],[("unfused",2),("fused",8)],[("fused",1),("unfused",1),("fused",4)],[("fused",2),("unfused",4),("unfused",8)]]
new2=[[("unfused",16),("fused",16)],[("unfused",2),("fused",8)],[("fused",1),("unfused",1),("fused",4)],[("fused",2),("unfused",4),("unfused",8)]]
for n,pl in (("old",old),("new",new),("new-unfused16-first",new2)):
    print(n, sim(pl))
import itertools
combos=[("unfused",w) for w in (1,2,4,8,16)]+[("fused",w) for w in (1,2,4,8,16)]
best=(1e9,None)
for a in itertools.product(range(4),repeat=10):
    if a[0]!=0: continue  # symmetry
    pl=[[c for c,p in zip(combos,a) if p==q] for q in range(4)]
    if any(not x for x in pl): continue
    m,_=sim(pl)
    if m<best[0]: best=(m,pl); print(m,pl,flush=True)
