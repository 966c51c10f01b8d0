// The pause program of the real node's pod sandboxes (tfkube's own, standard library only):
// built here because no registry image can be pulled. tools/kube/images packs it as an image.
module github.com/tfkube/tfkube/tools/kube/pause

go 1.24.0
