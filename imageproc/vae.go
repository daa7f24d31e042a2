package imageproc

// VAEPixels is diffusers' VaeImageProcessor.preprocess of an image already
// at the video size (resize it first with ResizeLanczos when it is not):
// channels-first [3, H, W] float32 in [-1, 1], each sample
// 2·(float32(v)/255) − 1 rounded in float32 as NumPy and PyTorch do it.
func VAEPixels(img *RGB) []float32 {
	n := img.Width * img.Height
	out := make([]float32, 3*n)
	for i := range n {
		for ch := range 3 {
			v := float32(img.Pix[3*i+ch]) / 255
			out[ch*n+i] = 2*v - 1
		}
	}
	return out
}
