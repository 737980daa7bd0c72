"""The RFBNet printed in seed 000 (1 input channel, 300x300), as memledger's built-in demo model."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicConv(nn.Module):
    def __init__(self, cin, cout, kernel, padding=0, dilation=1, relu=True):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=1, padding=padding, dilation=dilation, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.01, affine=True)
        self.relu = nn.ReLU(inplace=True) if relu else None

    def forward(self, x):
        x = self.bn(self.conv(x))
        if self.relu is not None:
            x = self.relu(x)
        return x


class BasicRFB_a(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        inter = cin // 4
        self.branch0 = nn.Sequential(BasicConv(cin, inter, 1), BasicConv(inter, inter, 3, padding=1, relu=False))
        self.branch1 = nn.Sequential(
            BasicConv(cin, inter, 1),
            BasicConv(inter, inter, (3, 1), padding=(1, 0)),
            BasicConv(inter, inter, 3, padding=3, dilation=3, relu=False))
        self.branch2 = nn.Sequential(
            BasicConv(cin, inter, 1),
            BasicConv(inter, inter, (1, 3), padding=(0, 1)),
            BasicConv(inter, inter, 3, padding=3, dilation=3, relu=False))
        self.branch3 = nn.Sequential(
            BasicConv(cin, inter // 2, 1),
            BasicConv(inter // 2, (inter // 4) * 3, (1, 3), padding=(0, 1)),
            BasicConv((inter // 4) * 3, inter, (3, 1), padding=(1, 0)),
            BasicConv(inter, inter, 3, padding=5, dilation=5, relu=False))
        self.ConvLinear = BasicConv(4 * inter, cout, 1, relu=False)
        self.shortcut = BasicConv(cin, cout, 1, relu=False)
        self.relu = nn.ReLU(inplace=False)

    def forward(self, x):
        x0 = self.branch0(x)
        x1 = self.branch1(x)
        x2 = self.branch2(x)
        x3 = self.branch3(x)
        out = self.ConvLinear(torch.cat((x0, x1, x2, x3), 1))
        return self.relu(out * 0.1 + self.shortcut(x))


def vgg_base():
    cfg = [24, 24, 'M', 48, 48, 'M', 96, 96, 96, 'M', 192, 192, 192]
    layers, cin = [], 1
    for v in cfg:
        if v == 'M':
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU(inplace=True)]
            cin = v
    return nn.ModuleList(layers)


class RFBNet(nn.Module):
    def __init__(self, num_classes=5):
        super().__init__()
        self.num_classes = num_classes
        self.base = vgg_base()
        self.Norm = BasicRFB_a(192, 192)
        self.loc = nn.ModuleList([nn.Conv2d(192, 4 * 5, 3, padding=1)])
        self.conf = nn.ModuleList([nn.Conv2d(192, num_classes * 5, 3, padding=1)])
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        for layer in self.base:
            x = layer(x)
        s = self.Norm(x)
        loc = s
        conf = s
        for l in self.loc:
            loc = l(s).permute(0, 2, 3, 1).contiguous()
        for c in self.conf:
            conf = c(s).permute(0, 2, 3, 1).contiguous()
        loc = loc.view(loc.size(0), -1, 4)
        conf = self.softmax(conf.view(conf.size(0), -1, self.num_classes))
        return loc, conf


def make(path, dtype=torch.float16):
    torch.manual_seed(0)
    model = RFBNet().eval()
    scripted = torch.jit.script(model)
    scripted.to(dtype)
    torch.jit.save(scripted, path)


if __name__ == "__main__":
    import sys
    make(sys.argv[1])
