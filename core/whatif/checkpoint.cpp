#include "whatif/checkpoint.h"

#include "allocator/gpu_replay.h"
#include "recording/build_report.h"
#include "report/trace_edit.h"
#include "support/format.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

namespace memledger {

namespace {

// torch.get_rng_state() on the CPU: the Mersenne Twister's state as a ByteTensor.
constexpr std::int64_t kCpuRngStateBytes = 5056;

bool inSubtree(const std::string& where, const std::string& path)
{
    return path.empty() ? where.empty() : isInsideModule(where, path); // the root's own events only
}

// Whether the autograd node of a forward op keeps that op's tensor inputs (so that a tensor it took lives until
// its backward runs). Ops that keep only their result (relu, sigmoid, softmax) or nothing (add, cat, views)
// are not listed; in-place activations keep their result, which is their input's storage.
bool keepsInputs(const std::string& op)
{
    static const char* const kKeep[] = {"conv", "linear", "addmm", "aten::mm", "bmm", "matmul", "einsum",
        "max_pool", "avg_pool", "adaptive_", "batch_norm", "layer_norm", "group_norm", "instance_norm", "aten::mul",
        "aten::div", "gelu", "silu", "hardswish", "hardsigmoid", "hardtanh", "leaky_relu", "prelu", "softplus",
        "aten::pow", "embedding", "mish", "elu", "upsample_bicubic", "grid_sampler", "aten::index", "gather"};
    for (const char* k : kKeep)
        if (op.find(k) != std::string::npos)
            return true;
    // An in-place activation (relu_, sigmoid_, tanh_) keeps its result: the storage it was given.
    static const char* const kInplaceResult[] = {"aten::relu_", "aten::sigmoid_", "aten::tanh_", "aten::relu6_"};
    for (const char* k : kInplaceResult)
        if (op == k)
            return true;
    return false;
}

} // namespace

bool savedBySelectiveCheckpoint(const std::string& op)
{
    // The dispatcher's ops the policy keeps, and the composite ops a program records them under (aten::linear is
    // addmm or mm below autograd, aten::matmul mm or bmm).
    static const char* const kSaved[] = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear",
        "aten::matmul", "scaled_dot_product"};
    for (const char* k : kSaved)
        if (op.rfind(k, 0) == 0 || (k[0] == 's' && op.find(k) != std::string::npos)) {
            const auto n = std::strlen(k);
            if (k[0] == 's' || op.size() == n || op[n] == '.')
                return true;
        }
    return false;
}

namespace {

// The order of what the rewrite places before one recorded event (TraceEdit::order's groups).
enum Rank : int {
    kFreeMoved = 0, // frees moved to "before event p"
    kRngSaved = 1, // the segment's RNG state at its forward's start
    kRecompute = 2, // the recomputation of a segment's forward
    kAfterRecompute = 3, // selective: a kept output of the segment dropped when its recomputation returns
    kOriginal = TraceEdit::kOriginalGroup,
};

struct Segment {
    std::string path;
    std::uint32_t fwdBegin = 0, fwdEnd = 0; // forward events [fwdBegin, fwdEnd): the segment's ops
    std::uint32_t opFirst = 0, opLast = 0;
    std::int64_t bwdBegin = -1, bwdEnd = -1; // its backward nodes' events [bwdBegin, bwdEnd)
    std::int64_t forward_ns = 0;
};

// The recorded step rewritten as it runs with torch.utils.checkpoint around some modules (the segments): the
// frees their checkpoints move, their saved RNG states and their recomputation, made with the trace editor.
class CheckpointRewriter {
public:
    CheckpointRewriter(const Report& r, CheckpointImpl impl, CheckpointSaves saves = CheckpointSaves::Nothing)
        : r_(r)
        , t_(*r.trace)
        , impl_(impl)
        , saves_(saves)
    {
        forward_ = findPhase(r.phases, "forward");
        backward_ = findPhase(r.phases, "backward");
        if (!forward_ || !backward_)
            throw std::invalid_argument("the report's training step has no forward or backward phase");
        usesOf_.resize(t_.size());
        for (std::size_t k = 0; k < r.forward_uses.size(); ++k)
            if (r.forward_uses[k].event < t_.size())
                usesOf_[r.forward_uses[k].event].push_back(static_cast<std::uint32_t>(k));
        strings_.reserve(t_.strings.size());
        for (std::size_t s = 0; s < t_.strings.size(); ++s)
            strings_.push_back(t_.strings.at(static_cast<std::uint32_t>(s)));
        if (saves_ == CheckpointSaves::MatmulsAndAttention) {
            savedOpString_.resize(strings_.size());
            for (std::size_t s = 0; s < strings_.size(); ++s)
                savedOpString_[s] = savedBySelectiveCheckpoint(strings_[s]);
        }
    }

    // Selective: whether event i happened inside an op whose outputs the policy keeps (not run again).
    bool inSavedOp(std::int64_t i) const
    {
        if (savedOpString_.empty())
            return false;
        const auto k = static_cast<std::size_t>(i);
        return savedOpString_[t_.inner_op[k]] || savedOpString_[t_.outer_op[k]];
    }
    // Selective: an allocation a kept op returned (not its scratch, freed before the op returns).
    bool keptOutput(std::int64_t i) const
    {
        if (!inSavedOp(i))
            return false;
        const auto j = t_.partner[static_cast<std::size_t>(i)];
        return j == kNoPartner || t_.op_seq[static_cast<std::size_t>(j)] != t_.op_seq[static_cast<std::size_t>(i)];
    }

    bool inForward(std::int64_t i) const { return i >= forward_->first_event && i < forward_->end_event; }
    bool inBackward(std::int64_t i) const { return i >= backward_->first_event && i < backward_->end_event; }

    // The segment of a module; empty optional with `why` when it cannot be one.
    std::optional<Segment> segmentOf(const std::string& path, std::string* why) const
    {
        Segment s;
        s.path = path;
        bool any = false;
        for (auto i = forward_->first_event; i < forward_->end_event && i < t_.size(); ++i) {
            if (!inSubtree(strings_[t_.where[i]], path))
                continue;
            if (!any) {
                s.opFirst = t_.op_seq[i];
                any = true;
            }
            s.opLast = t_.op_seq[i];
        }
        if (!any) {
            *why = path + ": its forward allocates nothing, there is nothing to checkpoint";
            return std::nullopt;
        }
        s.fwdBegin = static_cast<std::uint32_t>(firstEventOfOp(s.opFirst));
        s.fwdEnd = static_cast<std::uint32_t>(firstEventOfOp(s.opLast + 1));
        s.fwdEnd = std::min<std::uint32_t>(s.fwdEnd, forward_->end_event);
        for (auto i = backward_->first_event; i < backward_->end_event && i < t_.size(); ++i) {
            if (!inSubtree(strings_[t_.where[i]], path))
                continue;
            if (s.bwdBegin < 0)
                s.bwdBegin = i;
            s.bwdEnd = static_cast<std::int64_t>(i) + 1;
        }
        // The segment's backward begins with its first autograd node: an event of the segment's before it (its output
        // freed by the node of the module after it that saved it) is that module's.
        if (r_.ops && s.bwdBegin >= 0) {
            for (const auto& op : *r_.ops)
                if (op.backward && op.first_event < op.end_event && op.first_event >= backward_->first_event
                    && inSubtree(strings_[op.module], path)) {
                    s.bwdBegin = std::max<std::int64_t>(s.bwdBegin, op.first_event);
                    break;
                }
        }
        int layer = r_.findLayer(path);
        if (layer >= 0)
            s.forward_ns = r_.layers[static_cast<std::size_t>(layer)].forward_ns;
        if (auto op = inPlaceOnInput(s); !op.empty()) {
            *why = path + ": its " + op + " changes its input in place; the reentrant checkpoint's backward refuses "
                          "that (\"a leaf Variable that requires grad is being used in an in-place operation\") and "
                          "the non-reentrant one would apply it twice; not checkpointed";
            return std::nullopt;
        }
        if (impl_ == CheckpointImpl::Reentrant && !takesTensorFromRun(s)) {
            *why = path + ": its input does not require grad, so a reentrant checkpoint would leave its parameters "
                          "without gradients (PyTorch warns \"None of the inputs have requires_grad=True\"); not "
                          "checkpointed (the non-reentrant implementation handles it)";
            return std::nullopt;
        }
        if (s.bwdBegin < 0) {
            *why = path + ": no backward node of it allocates anything, there is nothing to recompute for";
            return std::nullopt;
        }
        return s;
    }

    // The first event at or after the start of op `op` (events are in op order).
    std::int64_t firstEventOfOp(std::uint32_t op) const
    {
        return std::lower_bound(t_.op_seq.begin(), t_.op_seq.end(), op) - t_.op_seq.begin();
    }

    bool madeIn(const Segment& s, std::int64_t i) const
    {
        return i >= s.fwdBegin && i < s.fwdEnd && inSubtree(strings_[t_.where[i]], s.path);
    }

    // The first in-place op (aten::relu_, aten::hardtanh_, ...) of the segment on a tensor from before it.
    std::string inPlaceOnInput(const Segment& s) const
    {
        for (const auto& u : r_.forward_uses) {
            if (u.op < s.opFirst || u.op > s.opLast || !inSubtree(strings_[u.module], s.path) || u.event >= s.fwdBegin)
                continue;
            if (u.modified)
                return strings_[u.op_name];
        }
        return {};
    }

    // Whether the segment's ops take an allocation made before it in this run (a tensor that requires grad
    // unless nothing before it has parameters, which this does not tell apart).
    bool takesTensorFromRun(const Segment& s) const
    {
        for (const auto& u : r_.forward_uses)
            if (u.op >= s.opFirst && u.op <= s.opLast && inSubtree(strings_[u.module], s.path)
                && u.event < s.fwdBegin)
                return true;
        return false;
    }

    Report run(const std::vector<Segment>& segments)
    {
        const auto n = static_cast<std::int64_t>(t_.size());
        TraceEdit edit(t_);
        edit_ = &edit;
        placed_.clear();
        placed_.reserve(t_.size() + t_.size() / 4);
        for (std::int64_t i = 0; i < n; ++i)
            placed_.push_back({i, kOriginal, t_.time_ns[static_cast<std::size_t>(i)]});
        // Where an original free ends up: the latest of the moves asked for each segment (a tensor can be
        // the output of one segment and the input of the next): before original event `pos`, in group `rank`.
        struct FreeAt {
            std::int64_t pos = -1;
            int rank = kFreeMoved;
            std::int64_t seq = 0;
        };
        std::vector<FreeAt> freeAt(static_cast<std::size_t>(n));
        std::int64_t seq = 0;
        auto wantFreeAt = [&](std::int64_t alloc, std::int64_t pos, int rank = kFreeMoved) {
            auto& f = freeAt[static_cast<std::size_t>(alloc)];
            if (f.pos < 0 || pos > f.pos || (pos == f.pos && rank > f.rank))
                f = {pos, rank, rank == kFreeMoved ? alloc : seq++};
        };
        for (const auto& s : segments)
            rewriteSegment(s, wantFreeAt, seq);
        for (std::int64_t i = 0; i < n; ++i) {
            const auto& at = freeAt[static_cast<std::size_t>(i)];
            const auto f = t_.partner[static_cast<std::size_t>(i)];
            if (at.pos < 0 || f == kNoPartner)
                continue;
            edit.move(static_cast<std::size_t>(f), static_cast<std::size_t>(at.pos));
            place(static_cast<std::size_t>(f), at.pos, at.rank, at.seq, t_.time_ns[static_cast<std::size_t>(f)]);
        }
        auto out = build();
        sources_ = eventSources(*out.trace);
        edit_ = nullptr;
        return out;
    }

    // After run(): for each event of the new trace, the recorded event whose size it has (-1: a new one).
    const std::vector<std::int64_t>& eventSources() const { return sources_; }

    std::int64_t recomputedOps() const { return recomputedOps_; }
    std::int64_t recomputedBytes() const { return recomputedBytes_; }

private:
    std::vector<std::int64_t> eventSources(const Trace& out) const
    {
        std::vector<std::int64_t> src(out.size(), -1);
        const auto& from = edit_->builtFrom();
        for (std::size_t k = 0; k < out.size(); ++k)
            if (out.action[k] == Action::Alloc)
                src[k] = edit_->sourceOf(from[k]);
        for (std::size_t k = 0; k < out.size(); ++k) // a free has its alloc's size
            if (out.action[k] == Action::Free && out.partner[k] != kNoPartner)
                src[k] = src[static_cast<std::size_t>(out.partner[k])];
        return src;
    }

    // The backward's last event of the nodes of `module` (exactly that path) before `before`, plus one: when an
    // op of that module releases what it saved.
    std::int64_t releaseOf(std::uint32_t module, std::int64_t before) const
    {
        for (auto i = before - 1; i >= backward_->first_event; --i)
            if (t_.where[static_cast<std::size_t>(i)] == module)
                return i + 1;
        return before;
    }

    template <typename WantFree>
    void rewriteSegment(const Segment& s, WantFree& wantFreeAt, std::int64_t& seq)
    {
        const bool reentrant = impl_ == CheckpointImpl::Reentrant;
        const auto bs = s.bwdBegin, be = s.bwdEnd;
        // The RNG state saved when the segment's forward starts: until the graph is freed (reentrant: it is
        // the autograd node's), or until the segment's backward ends (non-reentrant: the unpack hook's).
        auto rngEnd = reentrant ? static_cast<std::int64_t>(backward_->end_event) : be;
        const std::int64_t rngSeq = seq++, rngFreeSeq = seq++; // in this order, not the arguments' unspecified one
        addSynthetic(s.fwdBegin, kRngSaved, rngSeq, rngEnd, kFreeMoved, rngFreeSeq, s.path);

        // The segment's own allocations that outlive its forward.
        std::vector<std::int64_t> recomputeFreeAt(static_cast<std::size_t>(s.fwdEnd - s.fwdBegin), -1);
        const std::int64_t afterRecompute = -2; // non-reentrant: when the unpack hook returns
        // Non-reentrant: the recomputation stops once the last tensor the segment's nodes saved is made again
        // (torch.utils.checkpoint's early stop, on by default): the ops after the last reader that saves one are
        // not run again (a block's residual add).
        std::int64_t stopOp = -1;
        for (std::int64_t i = s.fwdBegin; i < s.fwdEnd; ++i) {
            if (t_.action[static_cast<std::size_t>(i)] != Action::Alloc || !madeIn(s, i))
                continue;
            const auto j = t_.partner[static_cast<std::size_t>(i)];
            if (j == kNoPartner || !inBackward(j) || j < bs || j >= be
                || !inSubtree(strings_[t_.where[static_cast<std::size_t>(j)]], s.path))
                continue;
            std::int64_t last = t_.op_seq[static_cast<std::size_t>(i)];
            for (auto k : usesOf_[static_cast<std::size_t>(i)]) // the readers that save it
                if (inSubtree(strings_[r_.forward_uses[k].module], s.path) && keepsInputs(strings_[r_.forward_uses[k].op_name]))
                    last = std::max<std::int64_t>(last, r_.forward_uses[k].op);
            stopOp = std::max(stopOp, last);
        }
        if (reentrant)
            stopOp = std::numeric_limits<std::int64_t>::max();
        if (r_.ops) {
            for (auto k = s.opFirst; k <= s.opLast && k < r_.ops->size() && static_cast<std::int64_t>(k) <= stopOp; ++k) {
                const auto& op = (*r_.ops)[k];
                if (!inSubtree(strings_[op.module], s.path))
                    continue;
                if (!savedOpString_.empty() && savedOpString_[op.name])
                    continue; // selective: kept, not run again
                ++recomputedOps_;
            }
        }
        for (std::int64_t i = s.fwdBegin; i < s.fwdEnd; ++i) {
            if (t_.action[static_cast<std::size_t>(i)] != Action::Alloc || !madeIn(s, i))
                continue;
            std::int64_t j = t_.partner[static_cast<std::size_t>(i)];
            if (keptOutput(i)) {
                // Selective: the output is kept from the forward and handed to the recomputation instead of being
                // made again. Freed in the forward: by the recomputation's last reader (the copy loop moves its
                // free there); the segment's output: when the recomputation returns; saved by a node: by it.
                if (j != kNoPartner && j >= s.fwdEnd && inForward(j))
                    wantFreeAt(i, bs, kAfterRecompute);
                continue;
            }
            if (j != kNoPartner && j < s.fwdEnd)
                continue; // freed within the segment's forward: the same in the recomputation
            if (j != kNoPartner && inForward(j)) {
                // An output nobody saved: reentrant, the recomputed one is held to the end of the backward.
                recomputeFreeAt[static_cast<std::size_t>(i - s.fwdBegin)] = reentrant ? be : afterRecompute;
                continue;
            }
            const bool freedBySegment = j != kNoPartner && inBackward(j) && j >= bs && j < be
                && inSubtree(strings_[t_.where[static_cast<std::size_t>(j)]], s.path);
            bool usedOutside = false, keptOutside = false;
            std::int64_t lastOp = t_.op_seq[static_cast<std::size_t>(i)];
            std::int64_t outsideRelease = -1;
            for (auto k : usesOf_[static_cast<std::size_t>(i)]) {
                const auto& u = r_.forward_uses[k];
                lastOp = std::max<std::int64_t>(lastOp, u.op);
                if (inSubtree(strings_[u.module], s.path))
                    continue;
                usedOutside = true;
                if (keepsInputs(strings_[u.op_name])) {
                    keptOutside = true;
                    outsideRelease = std::max(outsideRelease, releaseOf(u.module, bs));
                }
            }
            // The original: freed when its last holder lets go.
            if (freedBySegment) {
                if (keptOutside)
                    wantFreeAt(i, outsideRelease);
                else
                    wantFreeAt(i, firstEventOfOp(static_cast<std::uint32_t>(lastOp + 1)));
            }
            // Its recomputation.
            std::int64_t again;
            if (reentrant)
                again = (freedBySegment && !usedOutside) ? j : be; // the recomputed output is held to the end
            else
                again = freedBySegment ? j : afterRecompute; // what the segment's nodes saved, else dropped
            recomputeFreeAt[static_cast<std::size_t>(i - s.fwdBegin)] = again;
        }
        // Tensors from before the segment that it takes (its input): saved by the checkpoint until its backward
        // ends. Reentrant: the incoming gradient too.
        for (const auto& u : r_.forward_uses) {
            if (u.op < s.opFirst || u.op > s.opLast || !inSubtree(strings_[u.module], s.path) || u.event >= s.fwdBegin)
                continue;
            std::int64_t j = t_.partner[u.event];
            if (j != kNoPartner && j < be)
                wantFreeAt(u.event, be);
        }
        if (reentrant) {
            for (std::int64_t j = bs; j < be; ++j) {
                if (t_.action[static_cast<std::size_t>(j)] != Action::Free
                    || !inSubtree(strings_[t_.where[static_cast<std::size_t>(j)]], s.path))
                    continue;
                auto a = t_.partner[static_cast<std::size_t>(j)];
                if (a != kNoPartner && a >= backward_->first_event && a < bs)
                    wantFreeAt(a, be);
            }
        }

        // The recomputation, before the segment's first backward event: a forked RNG state around the forward's
        // events again.
        auto timeAt = t_.time_ns[static_cast<std::size_t>(std::min<std::int64_t>(bs, t_.size() - 1))];
        auto fwdStart = t_.time_ns[s.fwdBegin];
        auto fork = addRngState(bs, kRecompute, seq++, timeAt, s.path);
        std::vector<std::optional<TraceEdit::Handle>> copyOf(static_cast<std::size_t>(s.fwdEnd - s.fwdBegin));
        std::vector<TraceEdit::Handle> dropped;
        for (std::int64_t i = s.fwdBegin; i < s.fwdEnd; ++i) {
            auto a = t_.action[static_cast<std::size_t>(i)];
            auto time = timeAt + (t_.time_ns[static_cast<std::size_t>(i)] - fwdStart);
            if (static_cast<std::int64_t>(t_.op_seq[static_cast<std::size_t>(i)]) > stopOp && a == Action::Alloc)
                continue; // not run again (early stop): what it would have made is not made

            // Selective: a kept output its forward freed is freed where the recomputation's reader of it returns, and
            // a kept op does not run again.
            if (a == Action::Free) {
                auto al = t_.partner[static_cast<std::size_t>(i)];
                if (al != kNoPartner && static_cast<std::int64_t>(al) >= s.fwdBegin && madeIn(s, al) && keptOutput(al)) {
                    edit_->move(static_cast<std::size_t>(i), static_cast<std::size_t>(bs));
                    place(static_cast<std::size_t>(i), bs, kRecompute, seq++, time);
                    continue;
                }
            }
            if (inSavedOp(i))
                continue;
            if (a == Action::Alloc && madeIn(s, i)) {
                recomputedBytes_ += t_.bytes[static_cast<std::size_t>(i)];
                auto c = copyEvent(i, bs, kRecompute, seq++, time);
                copyOf[static_cast<std::size_t>(i - s.fwdBegin)] = c;
                auto again = recomputeFreeAt[static_cast<std::size_t>(i - s.fwdBegin)];
                auto j = t_.partner[static_cast<std::size_t>(i)];
                if (again == afterRecompute) {
                    dropped.push_back(c);
                } else if (again >= 0) { // freed by the node that used it, or when the segment's backward ends
                    if (j != kNoPartner)
                        edit_->pair(c, copyEvent(j, again, kFreeMoved, seq++, 0));
                    else // the original is never freed in the step: the copy's own free
                        place(edit_->addFree(static_cast<std::size_t>(again), c), again, kFreeMoved, seq++, 0);
                }
            } else if (a == Action::Free) {
                auto al = t_.partner[static_cast<std::size_t>(i)];
                if (al != kNoPartner && al >= s.fwdBegin && madeIn(s, al) && copyOf[static_cast<std::size_t>(al - s.fwdBegin)]) {
                    auto f = copyEvent(i, bs, kRecompute, seq++, time);
                    edit_->pair(*copyOf[static_cast<std::size_t>(al - s.fwdBegin)], f);
                }
            }
        }
        auto endTime = timeAt + (t_.time_ns[static_cast<std::size_t>(s.fwdEnd - 1)] - fwdStart);
        addRngState(bs, kRecompute, seq++, endTime, s.path, fork);
        for (auto c : dropped)
            place(edit_->addFree(static_cast<std::size_t>(bs), c), bs, kRecompute, seq++, endTime);
        shifts_.emplace_back(bs, s.forward_ns);
    }

    // The ordering and time of a handle of the edit: placed before original event `pos`, in rank order.
    void place(TraceEdit::Handle h, std::int64_t pos, int rank, std::int64_t seq, std::int64_t time)
    {
        edit_->order(h, rank, seq);
        if (placed_.size() <= h)
            placed_.resize(h + 1);
        placed_[h] = {pos, rank, time};
    }

    // An event of the RNG state (torch.get_rng_state()) of segment `where`: an alloc, or the free of `alloc`.
    TraceEdit::Handle addRngState(std::int64_t pos, int rank, std::int64_t seq, std::int64_t time,
        const std::string& where, std::optional<TraceEdit::Handle> alloc = std::nullopt)
    {
        auto h = alloc ? edit_->addFree(static_cast<std::size_t>(pos), *alloc)
                       : edit_->addAlloc(static_cast<std::size_t>(pos), kCpuRngStateBytes, Ledger::SavedActivations,
                           where, "aten::get_rng_state", std::int8_t {-1});
        place(h, pos, rank, seq, time);
        return h;
    }

    void addSynthetic(std::int64_t pos, int rank, std::int64_t seq, std::int64_t freePos, int freeRank,
        std::int64_t freeSeq, const std::string& where)
    {
        auto time = t_.time_ns[static_cast<std::size_t>(std::min<std::int64_t>(pos, t_.size() - 1))];
        auto a = addRngState(pos, rank, seq, time, where);
        addRngState(freePos, freeRank, freeSeq, 0, where, a);
    }

    TraceEdit::Handle copyEvent(std::int64_t src, std::int64_t pos, int rank, std::int64_t seq, std::int64_t time)
    {
        auto h = edit_->copy(static_cast<std::size_t>(pos), static_cast<std::size_t>(src));
        place(h, pos, rank, seq, time);
        return h;
    }

    // The rewritten step: the edit's trace with the recomputations' time added from where each was inserted.
    Report build()
    {
        Report pr = r_;
        pr.forward_uses.clear(); // their events are the recorded step's: this one cannot be checkpointed again
        pr.forward_uses_recorded = false;
        pr.simulated_gpu.reset();
        pr.simulated_reserved_peak_bytes = 0;
        pr.whatif.reset();
        auto ops = r_.ops ? *r_.ops : std::vector<OpCall> {};
        Trace out = edit_->build(r_.ops ? &ops : nullptr, &pr.phases);
        if (r_.ops)
            pr.ops = std::make_shared<const std::vector<OpCall>>(std::move(ops));
        std::sort(shifts_.begin(), shifts_.end());
        std::size_t shift = 0;
        std::int64_t shiftNs = 0;
        std::int64_t lastTime = 0;
        const auto& from = edit_->builtFrom();
        for (std::size_t k = 0; k < out.size(); ++k) {
            const auto& p = placed_[from[k]];
            while (shift < shifts_.size() && shifts_[shift].first <= p.pos
                && (p.rank == kOriginal || shifts_[shift].first < p.pos)) {
                shiftNs += shifts_[shift].second;
                ++shift;
            }
            std::int64_t time = p.time_ns;
            if (p.rank == kOriginal || p.rank == kRecompute)
                time += shiftNs;
            else if (p.pos < static_cast<std::int64_t>(t_.size()))
                time = t_.time_ns[static_cast<std::size_t>(std::max<std::int64_t>(p.pos - 1, 0))] + shiftNs;
            else
                time = lastTime;
            time = std::max(time, lastTime);
            lastTime = time;
            out.time_ns[k] = time;
        }
        pr.trace = std::make_shared<const Trace>(std::move(out));
        setPeakFromTrace(pr, *pr.trace);
        return pr;
    }

    // Where and when each handle of the edit goes (the edit orders them by rank, then seq).
    struct Placed {
        std::int64_t pos = 0; // before original event `pos`
        int rank = kOriginal;
        std::int64_t time_ns = 0;
    };

    const Report& r_;
    const Trace& t_;
    CheckpointImpl impl_;
    CheckpointSaves saves_;
    std::vector<bool> savedOpString_; // selective: per string id, whether it names a kept op
    std::int64_t recomputedOps_ = 0;
    std::vector<std::int64_t> sources_; // run()'s eventSources
    std::int64_t recomputedBytes_ = 0;
    const Phase* forward_ = nullptr;
    const Phase* backward_ = nullptr;
    std::vector<std::vector<std::uint32_t>> usesOf_;
    std::vector<std::string> strings_;
    TraceEdit* edit_ = nullptr; // while run() rewrites the step
    std::vector<Placed> placed_; // per handle of the edit
    std::vector<std::pair<std::int64_t, std::int64_t>> shifts_; // (position, ns of recomputation inserted there)
};


void checkReport(const Report& r)
{
    if (r.run.mode != RunMode::Train)
        throw std::invalid_argument("checkpointing is a what-if of a training step: record the model with --mode train");
    if (!r.trace)
        throw std::invalid_argument("the report has no trace to predict from");
    if (r.forward_uses.empty())
        throw std::invalid_argument(
            "the report does not say which tensors the forward's ops took (saved by an older memledger); "
            "record the model again");
}

} // namespace

const char* checkpointImplName(CheckpointImpl impl)
{
    return impl == CheckpointImpl::Reentrant ? "reentrant" : "non-reentrant";
}

std::optional<CheckpointImpl> checkpointImplFromName(const std::string& name)
{
    if (name == "reentrant")
        return CheckpointImpl::Reentrant;
    if (name == "non-reentrant" || name == "nonreentrant" || name == "non_reentrant")
        return CheckpointImpl::NonReentrant;
    return std::nullopt;
}

std::vector<std::string> checkpointableModules(const Report& r)
{
    std::vector<std::string> out;
    if (r.run.mode != RunMode::Train || !r.trace || r.forward_uses.empty())
        return out;
    const Phase* forward = nullptr;
    for (const auto& p : r.phases)
        if (p.name == "forward")
            forward = &p;
    if (!forward)
        return out;
    std::set<std::uint32_t> seen;
    for (auto i = forward->first_event; i < forward->end_event && i < r.trace->size(); ++i)
        seen.insert(r.trace->where[i]);
    std::set<std::string> paths;
    for (auto id : seen) {
        std::string p = r.trace->strings.at(id);
        while (!p.empty()) {
            paths.insert(p);
            auto dot = p.rfind('.');
            p = dot == std::string::npos ? std::string() : p.substr(0, dot);
        }
    }
    for (const auto& l : r.layers)
        if (!l.path.empty() && paths.count(l.path))
            out.push_back(l.path);
    return out;
}

CheckpointPrediction predictCheckpoint(
    const Report& r, const std::vector<std::string>& paths, CheckpointImpl impl, bool withReserved, CheckpointSaves saves)
{
    checkReport(r);
    if (saves != CheckpointSaves::Nothing && impl == CheckpointImpl::Reentrant)
        throw std::invalid_argument("selective checkpointing runs on the non-reentrant checkpoint only "
                                    "(create_selective_checkpoint_contexts needs use_reentrant=False)");
    CheckpointPrediction p;
    p.impl = impl;
    p.saves = saves;
    p.recorded_peak_bytes = r.peak_bytes;
    p.recorded_peak_total_bytes = r.peak_total_bytes;
    std::vector<std::string> asked;
    for (const auto& path : paths) {
        if (path.empty())
            throw std::invalid_argument("the root module cannot be checkpointed within its own step: name a module "
                                        "inside it");
        if (r.findLayer(path) < 0)
            throw std::invalid_argument("no module '" + path + "' in the model (module paths as in the layer tree, "
                                        "such as layer1.0.conv1)");
        if (std::find(asked.begin(), asked.end(), path) == asked.end())
            asked.push_back(path);
    }
    CheckpointRewriter tr(r, impl, saves);
    std::vector<Segment> segments;
    for (const auto& path : asked) {
        bool inner = false;
        for (const auto& other : asked)
            if (other != path && inSubtree(path, other))
                inner = true;
        if (inner) {
            p.notes.push_back(path + " is inside another checkpointed module: left out");
            continue;
        }
        std::string why;
        auto s = tr.segmentOf(path, &why);
        if (!s) {
            p.notes.push_back(why);
            continue;
        }
        segments.push_back(*s);
        p.checkpoint.push_back(path);
        p.recompute_ms += static_cast<double>(s->forward_ns) / 1e6;
    }
    std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) { return a.fwdBegin < b.fwdBegin; });
    auto report = std::make_shared<Report>(tr.run(segments));
    p.event_source = tr.eventSources();
    p.recomputed_ops = tr.recomputedOps();
    p.recomputed_bytes = tr.recomputedBytes();
    if (const Phase* forward = findPhase(r.phases, "forward")) {
        for (auto i = forward->first_event; i < forward->end_event && i < r.trace->size(); ++i)
            if (r.trace->action[i] == Action::Alloc)
                p.forward_bytes += r.trace->bytes[i];
        if (r.ops)
            for (const auto& op : *r.ops)
                if (op.first_event >= forward->first_event && op.first_event < forward->end_event)
                    ++p.forward_ops;
    }
    report->notes.push_back("predicted: checkpointing " + std::to_string(p.checkpoint.size()) + " module(s) ("
        + checkpointImplName(impl) + (saves == CheckpointSaves::MatmulsAndAttention ? ", selective: the outputs of "
            "matrix products and attention kept" : "") + "); " + std::to_string(p.recomputed_ops) + " of the forward's "
        + std::to_string(p.forward_ops) + " ops run again in the backward (" + formatPercent(100.0 * p.recomputeShare())
        + "), allocating " + formatBytes(p.recomputed_bytes) + " again");
    if (withReserved) {
        report->simulated_gpu = std::make_shared<const SimulatedGpu>(simulateGpu(*report));
        report->simulated_reserved_peak_bytes = report->simulated_gpu->peak_reserved;
        p.predicted_reserved_bytes = report->simulated_reserved_peak_bytes;
    }
    p.predicted_peak_bytes = report->peak_bytes;
    p.predicted_peak_total_bytes = report->peak_total_bytes;
    p.saving_bytes = p.recorded_peak_bytes - p.predicted_peak_bytes;
    if (p.worse())
        p.notes.push_back("this checkpoint makes the peak worse: " + formatBytes(p.predicted_peak_bytes) + " against "
            + formatBytes(p.recorded_peak_bytes) + " without it (the recomputed forward is held during its "
            "backward while little was saved)");
    p.report = std::move(report);
    return p;
}

CheckpointPrediction predictCheckpoint(const Report& r, const CheckpointSpec& spec, bool withReserved)
{
    if (spec.mode == CheckpointMode::Auto)
        throw std::invalid_argument("--checkpoint auto is a plan for a budget (planCheckpoints), not one step");
    if (spec.none()) {
        checkReport(r);
        CheckpointPrediction p;
        p.recorded_peak_bytes = p.predicted_peak_bytes = r.peak_bytes;
        p.recorded_peak_total_bytes = p.predicted_peak_total_bytes = r.peak_total_bytes;
        p.predicted_reserved_bytes = r.simulated_reserved_peak_bytes;
        p.report = std::make_shared<Report>(r);
        p.event_source.resize(r.trace->size());
        for (std::size_t i = 0; i < p.event_source.size(); ++i)
            p.event_source[i] = static_cast<std::int64_t>(i);
        return p;
    }
    return predictCheckpoint(r, checkpointedModules(r.layers, spec), spec.implementation(), withReserved, spec.saves());
}

std::string CheckpointSpec::text() const
{
    switch (mode) {
    case CheckpointMode::None:
        return "none";
    case CheckpointMode::Auto:
        return "auto";
    case CheckpointMode::Modules: {
        const auto paths = splitComma(modules);
        if (paths.size() <= 3)
            return modules;
        return std::to_string(paths.size()) + " modules (" + paths.front() + " ... " + paths.back() + ")";
    }
    case CheckpointMode::Full:
    case CheckpointMode::Selective:
        break;
    }
    std::string t = mode == CheckpointMode::Full ? "full" : "selective";
    if (every > 1)
        t += " (every " + std::to_string(every) + (every == 2 ? "nd" : every == 3 ? "rd" : "th") + " block)";
    return t;
}

CheckpointSpec parseCheckpointSpec(const std::string& text, int every, std::optional<CheckpointImpl> impl)
{
    CheckpointSpec spec;
    spec.impl = impl;
    if (every < 1)
        throw std::invalid_argument("--checkpoint-every must be at least 1, not " + std::to_string(every));
    spec.every = every;
    if (text.empty())
        throw std::invalid_argument("--checkpoint needs none, full, selective, auto or module paths (layers.*)");
    if (text == "none")
        spec.mode = CheckpointMode::None;
    else if (text == "full")
        spec.mode = CheckpointMode::Full;
    else if (text == "selective")
        spec.mode = CheckpointMode::Selective;
    else if (text == "auto")
        spec.mode = CheckpointMode::Auto;
    else {
        spec.mode = CheckpointMode::Modules;
        spec.modules = text;
    }
    if (every > 1 && spec.mode != CheckpointMode::Full && spec.mode != CheckpointMode::Selective)
        throw std::invalid_argument("--checkpoint-every is for --checkpoint full or selective (every K-th block), not '"
            + text + "'");
    if (spec.mode == CheckpointMode::Selective && spec.implementation() == CheckpointImpl::Reentrant)
        throw std::invalid_argument("--checkpoint selective runs on the non-reentrant checkpoint only "
                                    "(create_selective_checkpoint_contexts): drop --checkpoint-impl reentrant");
    return spec;
}

std::vector<CheckpointSpec> parseCheckpointSpecs(const std::string& text, int every, std::optional<CheckpointImpl> impl)
{
    const auto items = splitComma(text);
    const bool modes = !items.empty() && std::all_of(items.begin(), items.end(), [](const std::string& i) {
        return i == "none" || i == "full" || i == "selective";
    });
    std::vector<CheckpointSpec> out;
    if (!modes)
        return {parseCheckpointSpec(text, every, impl)};
    for (const auto& item : items) {
        auto spec = parseCheckpointSpec(item, item == "none" ? 1 : every, impl);
        if (std::find(out.begin(), out.end(), spec) == out.end())
            out.push_back(spec);
    }
    return out;
}

std::vector<CheckpointSpec> checkpointsToAnalyze(
    const std::vector<CheckpointSpec>& asked, const ModelInfo& model, std::vector<std::string>* notes)
{
    const auto& exported = model.exported_checkpointing;
    if (!asked.empty() || exported.modules.empty())
        return asked;
    CheckpointSpec spec;
    spec.mode = CheckpointMode::Modules;
    for (const auto& m : exported.modules)
        spec.modules += (spec.modules.empty() ? "" : ",") + m;
    spec.impl = checkpointImplFromName(exported.implementation);
    if (notes) {
        notes->push_back("the model was exported with activation checkpointing on (" + exported.source + ": "
            + std::to_string(exported.modules.size()) + " modules, " + exported.implementation
            + "), which torch.export does not keep: its training step is analysed with it (--checkpoint none for the "
              "step without)");
        if (exported.offload)
            notes->push_back("its checkpoints hold their saved inputs in host memory (offload=True): memledger keeps "
                             "them on the device, an upper bound for the device by the layers' inputs");
        if (exported.context_fn)
            notes->push_back("its checkpoints take a context_fn (a selective policy) memledger cannot read: modelled "
                             "as full checkpointing, an upper bound");
    }
    return {spec};
}

std::vector<std::string> checkpointedModules(const std::vector<LayerStats>& layers, const CheckpointSpec& spec)
{
    switch (spec.mode) {
    case CheckpointMode::None:
    case CheckpointMode::Auto:
        return {};
    case CheckpointMode::Modules: {
        auto paths = modulesMatching(layers, spec.modules, "--checkpoint");
        return paths;
    }
    case CheckpointMode::Full:
    case CheckpointMode::Selective:
        break;
    }
    const auto blocks = largestRepeatedBlocks(layers);
    if (blocks.size() < 2)
        throw std::invalid_argument("--checkpoint " + spec.text() + " checkpoints each repeated block (a decoder's "
            "layers), and this model repeats none: name the modules instead (--checkpoint PATH,PATH, \"*\" for any "
            "one name)");
    std::vector<std::string> out;
    for (std::size_t k = 0; k < blocks.size(); k += static_cast<std::size_t>(spec.every))
        out.push_back(blocks[k]);
    return out;
}

std::vector<std::string> repeatedBlocks(const Report& r, const std::vector<std::string>& candidates)
{
    std::set<std::string> usable(candidates.begin(), candidates.end());
    return largestRepeatedBlocks(r.layers, [&usable](const std::string& path) { return usable.count(path) > 0; });
}

CheckpointPlan planCheckpoints(const Report& r, std::int64_t budget, CheckpointImpl impl)
{
    checkReport(r);
    CheckpointPlan plan;
    plan.budget_bytes = budget;
    auto candidates = checkpointableModules(r);
    // A plan lists its modules in the model's order (call order of the layers), never sorted as text.
    std::map<std::string, std::size_t> order;
    for (std::size_t i = 0; i < r.layers.size(); ++i)
        order.emplace(r.layers[i].path, i);
    auto rank = [&](const std::string& path) {
        auto it = order.find(path);
        return it == order.end() ? r.layers.size() : it->second;
    };
    std::map<std::vector<std::string>, CheckpointPrediction> cache;
    auto normal = [&](std::vector<std::string> set) {
        std::sort(set.begin(), set.end(), [&](const std::string& a, const std::string& b) {
            auto ra = rank(a), rb = rank(b);
            return ra != rb ? ra < rb : a < b;
        });
        set.erase(std::unique(set.begin(), set.end()), set.end());
        std::vector<std::string> out;
        for (const auto& a : set) {
            bool inner = false;
            for (const auto& b : set)
                if (a != b && inSubtree(a, b))
                    inner = true;
            if (!inner)
                out.push_back(a);
        }
        return out;
    };
    auto eval = [&](const std::vector<std::string>& set) -> const CheckpointPrediction& {
        auto it = cache.find(set);
        if (it != cache.end())
            return it->second;
        ++plan.evaluated;
        auto p = predictCheckpoint(r, set, impl, false);
        p.report.reset(); // keep the cache small
        plan.tried.push_back(p);
        return cache.emplace(set, std::move(p)).first->second;
    };
    // Modules that a checkpoint cannot go around (nothing recomputed, or left out) are not candidates.
    {
        std::vector<std::string> usable;
        for (const auto& c : candidates) {
            const auto& p = eval({c});
            if (!p.checkpoint.empty())
                usable.push_back(c);
        }
        candidates = usable;
    }
    // The one budget rule (DeviceOverheads): the allocator's share of the GPU's memory.
    const auto share = DeviceOverheads::estimates().allocatorShare(budget);
    auto fits = [&](const CheckpointPrediction& p) { return p.predicted_peak_total_bytes <= share; };
    auto better = [&](const CheckpointPrediction& a, const CheckpointPrediction& b) {
        // a better than b: fitting first, then less recompute, then lower peak.
        if (fits(a) != fits(b))
            return fits(a);
        if (fits(a))
            return a.recompute_ms < b.recompute_ms
                || (a.recompute_ms == b.recompute_ms && a.predicted_peak_bytes < b.predicted_peak_bytes);
        return a.predicted_peak_total_bytes < b.predicted_peak_total_bytes;
    };
    // Greedy over `pool`: add the module that lowers the peak most per recompute time until the plan fits.
    auto greedy = [&](std::vector<std::string> current, const std::vector<std::string>& pool) {
        for (int round = 0; round < 64 && !fits(eval(current)); ++round) {
            const auto& now = eval(current);
            double bestScore = 0.0;
            std::vector<std::string> next;
            for (const auto& c : pool) {
                if (std::find(current.begin(), current.end(), c) != current.end())
                    continue;
                auto set = current;
                set.push_back(c);
                set = normal(set);
                if (set == current)
                    continue;
                const auto& p = eval(set);
                auto gain = static_cast<double>(now.predicted_peak_bytes - p.predicted_peak_bytes);
                if (gain <= 0)
                    continue;
                auto cost = std::max(1e-3, p.recompute_ms - now.recompute_ms);
                auto score = fits(p) ? 1e30 / std::max(1e-3, p.recompute_ms) : gain / cost;
                if (score > bestScore) {
                    bestScore = score;
                    next = set;
                }
            }
            if (next.empty())
                break;
            current = next;
        }
        return current;
    };
    // Local improvement: drop a module, or (with `swaps`) swap one for another of `pool`, while the plan gets better.
    auto improve = [&](std::vector<std::string> current, const std::vector<std::string>& pool, bool swaps) {
        CheckpointPrediction best = eval(current);
        for (bool improved = true; improved;) {
            improved = false;
            std::vector<std::vector<std::string>> moves;
            for (std::size_t k = 0; k < current.size(); ++k) {
                auto drop = current;
                drop.erase(drop.begin() + static_cast<std::ptrdiff_t>(k));
                moves.push_back(drop);
                if (!swaps)
                    continue;
                for (const auto& c : pool) {
                    if (std::find(current.begin(), current.end(), c) != current.end())
                        continue;
                    auto swap = drop;
                    swap.push_back(c);
                    moves.push_back(normal(swap));
                }
            }
            for (const auto& m : moves) {
                const auto& p = eval(m);
                if (better(p, best)) {
                    best = p;
                    current = m;
                    improved = true;
                }
            }
        }
        return current;
    };
    // The repeated blocks first (each decoder layer, as users wrap them with torch.utils.checkpoint): a plan of
    // whole blocks where one fits, the fewest recomputed; scattered submodules only where whole blocks do not.
    std::vector<std::string> current;
    const auto blocks = repeatedBlocks(r, candidates);
    bool byBlocks = false;
    if (blocks.size() >= 2 && !fits(eval(current)) && fits(eval(normal(blocks)))) {
        // The first k blocks, the fewest that fit (as users wrap layers[:k]), then any block that is not needed
        // dropped (blocks of unequal size, as a CNN's stages).
        std::size_t lo = 0, hi = blocks.size(); // !fits(first lo), fits(first hi)
        auto first = [&](std::size_t k) { return normal(std::vector<std::string>(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(k))); };
        while (hi - lo > 1) {
            auto mid = lo + (hi - lo) / 2;
            (fits(eval(first(mid))) ? hi : lo) = mid;
        }
        current = improve(first(hi), blocks, false);
        byBlocks = true;
    } else {
        current = greedy(blocks.size() >= 2 && !fits(eval(current)) ? normal(blocks) : current, candidates);
        current = improve(current, candidates, true);
    }
    plan.prediction = predictCheckpoint(r, current, impl, true);
    plan.fits = fits(plan.prediction);
    if (byBlocks)
        plan.prediction.notes.push_back("planned by whole blocks: " + std::to_string(current.size()) + " of the "
            + std::to_string(blocks.size()) + " " + r.layers[rank(blocks.front())].type
            + " blocks, as torch.utils.checkpoint wraps a model's layers");
    if (!plan.fits)
        plan.prediction.notes.push_back("no set of checkpoints found brings the peak total within "
            + formatBytes(share) + " (" + formatBytes(budget) + " less the CUDA context, an estimate); this plan has the lowest peak found");
    return plan;
}

} // namespace memledger
