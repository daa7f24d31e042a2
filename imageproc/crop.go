package imageproc

// CenterCrop cuts a width×height window from the middle of src as
// transformers' image_transforms.center_crop does: the window starts at
// floor((W - width) / 2), floor((H - height) / 2); where the image is
// smaller than the window it is centred in zeros (black), the extra
// column or row going to the left or top when the difference is odd.
func CenterCrop(src *RGB, width, height int) (*RGB, error) {
	if err := checkSizes(src, width, height); err != nil {
		return nil, err
	}
	top, left := floorHalf(src.Height-height), floorHalf(src.Width-width)
	out := &RGB{Width: width, Height: height, Pix: make([]uint8, 3*width*height)}
	for y := range height {
		sy := y + top
		if sy < 0 || sy >= src.Height {
			continue
		}
		x0, x1 := max(0, -left), min(width, src.Width-left)
		if x0 >= x1 {
			continue
		}
		copy(out.Pix[out.at(x0, y):out.at(x1, y)], src.Pix[src.at(x0+left, sy):src.at(x1+left, sy)])
	}
	return out, nil
}

// floorHalf is Python's n // 2 (floor, also for negative n). Padding then
// cropping, as the reference does, lands on the same offsets: a negative
// floor(d/2) is minus the ceil(-d/2) pad it puts before the image.
func floorHalf(n int) int {
	if n >= 0 {
		return n / 2
	}
	return -((-n + 1) / 2)
}
